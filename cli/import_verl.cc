// distckpt import-verl: a verl FSDP checkpoint (per-rank
// model/optim/extra_state_world_size_W_rank_r.pt files) converted into a
// distckpt checkpoint (native or DCP) that loads under any world size.
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "engine/verl_convert.h"
#include "format/format.h"
#include "format/verl/verl_reshard.h"

namespace distckpt {

int ImportVerlCommand(const std::string& src, const std::string& dst, const std::string& format) {
  SaveOptions options;
  options.format = &FormatByName(format);
  const int world = ConvertVerlCheckpoint(src, dst, options);
  std::cout << fmt::format("{}: verl FSDP checkpoint of world size {} written to {} ({})\n", src,
                           world, dst, format);
  return kExitOk;
}

int ReshardVerlCommand(const ReshardArgs& args) {
  VerlReshardOptions options;
  options.world_size = args.world_size;
  options.fsdp_version = args.fsdp_version;
  const VerlReshardReport report = ReshardVerl(args.dir, args.out, options);
  for (const std::string& line : report.lines) std::cout << line << "\n";
  std::cout << fmt::format("{}: verl checkpoint for {} ranks written to {}\n", args.dir,
                           args.world_size, args.out);
  return kExitOk;
}

}  // namespace distckpt
