// distckpt import-verl: a verl FSDP checkpoint (per-rank
// model/optim/extra_state_world_size_W_rank_r.pt files) converted into a
// distckpt checkpoint (native or DCP) that loads under any world size.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "engine/verl_convert.h"
#include "format/format.h"

namespace distckpt {
namespace {

struct ImportVerlArgs {
  std::string src, dir, format = "native";
};

int ImportVerlCommand(const std::string& src, const std::string& dst, const std::string& format) {
  SaveOptions options;
  options.format = &FormatByName(format);
  const int world = ConvertVerlCheckpoint(src, dst, options);
  std::cout << fmt::format("{}: verl FSDP checkpoint of world size {} written to {} ({})\n", src,
                           world, dst, format);
  return kExitOk;
}

}  // namespace

Command AddImportVerlCommand(CLI::App& app) {
  auto args = std::make_shared<ImportVerlArgs>();
  CLI::App* import_verl = app.add_subcommand(
      "import-verl",
      "convert verl's per-rank FSDP files into a checkpoint (any world size on load)");
  import_verl
      ->add_option("src", args->src, "verl checkpoint directory (model_world_size_W_rank_r.pt)")
      ->required();
  import_verl->add_option("--dir", args->dir, "destination checkpoint directory")->required();
  import_verl->add_option("--format", args->format, "native (default) or a DCP format name");
  return {import_verl,
          [args](CommandLine&) { return ImportVerlCommand(args->src, args->dir, args->format); }};
}

}  // namespace distckpt
