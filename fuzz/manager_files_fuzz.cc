// libFuzzer target: the files a training run's root holds beside its
// checkpoints (manager/): the tracker (latest_checkpointed_iteration.txt)
// and distckpt's iteration manifest (distckpt_iteration.json), read the way
// `manage list` and `train --resume` read them: ParseTracker, the manifest
// through ParseJson + IterationManifest::FromJson, and ScanRoot over a root
// holding both (Megatron and verl layouts), with directory names taken
// from the input too.
//
// Input: byte 0 picks the layout (even: Megatron, odd: verl); the rest is
// split at the first two NULs into the tracker's text, the manifest's text
// and an iteration directory's name. Any input is read or refused with
// CheckpointError; ScanRoot never throws for a bad tracker or manifest (it
// reports them in the catalog).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json_parse.h"
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/tracker.h"

namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The parts of the input: tracker, manifest, directory name.
std::string_view Next(std::string_view& rest) {
  size_t nul = rest.find('\0');
  std::string_view part = rest.substr(0, nul);
  rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  return part;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const fs::path base =
      fs::temp_directory_path() / ("manager-files-fuzz-" + std::to_string(getpid()));
  const distckpt::CheckpointLayout layout =
      data[0] % 2 == 0 ? distckpt::CheckpointLayout::kMegatron : distckpt::CheckpointLayout::kVerl;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string_view tracker = Next(rest), manifest = Next(rest), name = Next(rest);

  try {
    distckpt::ParseTracker(std::string(tracker), "fuzz/tracker");
  } catch (const distckpt::CheckpointError&) {
  }
  try {
    distckpt::IterationManifest::FromJson(distckpt::ParseJson(manifest, "fuzz/manifest"),
                                          "fuzz/manifest");
  } catch (const distckpt::CheckpointError&) {
  }
  distckpt::ParseIterationDirName(layout, name);

  // A root with the tracker, one well-named iteration directory holding the
  // manifest, and one directory of the input's name when it is a plain name.
  std::error_code ec;
  fs::remove_all(base, ec);
  const fs::path iteration = base / distckpt::IterationDirName(layout, 5);
  fs::create_directories(iteration);
  WriteFile(base / distckpt::kTrackerFile, tracker);
  WriteFile(iteration / distckpt::kManifestFile, manifest);
  if (!name.empty() && name.size() < 64 && name.find('/') == std::string_view::npos &&
      name != "." && name != "..") {
    fs::create_directories(base / std::string(name), ec);
    if (!ec) WriteFile(base / std::string(name) / distckpt::kManifestFile, manifest);
  }
  try {
    distckpt::Catalog catalog = distckpt::ScanRoot(distckpt::Env::Default(), base.string(), layout);
    for (const distckpt::CatalogEntry& e : catalog.entries) {
      if (!e.complete && e.why_incomplete.empty()) __builtin_trap();  // always says why
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
