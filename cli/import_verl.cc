// distckpt import-verl: a verl FSDP checkpoint (per-rank
// model/optim/extra_state_world_size_W_rank_r.pt files) converted into a
// distckpt checkpoint (native or DCP) that loads under any world size.
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "engine/verl_convert.h"
#include "format/format.h"

namespace distckpt {

int ImportVerlCommand(const std::string& src, const std::string& dst, const std::string& format) {
  SaveOptions options;
  options.format = &FormatByName(format);
  const int world = ConvertVerlCheckpoint(src, dst, options);
  std::cout << fmt::format("{}: verl FSDP checkpoint of world size {} written to {} ({})\n", src,
                           world, dst, format);
  return kExitOk;
}

}  // namespace distckpt
