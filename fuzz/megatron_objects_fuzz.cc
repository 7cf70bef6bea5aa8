// libFuzzer target: the Megatron objects a DCP checkpoint carries in its bytes
// items (format/dcp/dcp_reader.h ReadObjectRecord / ReadCommonState): the
// common_state object of Megatron-Core 0.20 (argparse.Namespace args with
// Megatron's enums, the rerun state machine, OptimizerConfig, ...) and the
// other ShardedObjects, each torch.save of a list. Read as the reader
// reads them: every record CRC-checked, data.pkl unpickled with Megatron's
// allow-list, classes off it carried as opaque data (or refused, as
// --strict-globals does, for odd-sized inputs), the value as JSON; then
// written back as distckpt writes a common state (TorchSaveJson) and read
// again.
//
// Input: parts (fuzz_parts.h) data.pkl, then the storage records data/0 ..
// data/7 (absent when empty), archived anew so that every CRC holds and
// mutations reach the unpickler and the JSON conversion. Any input reads or
// throws CheckpointError (DISTCKPT_FUZZ_VERBOSE=1 prints which).
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"
#include "format/dcp/unknown_globals.h"
#include "fuzz_parts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = getenv("DISTCKPT_FUZZ_VERBOSE") != nullptr;
  const std::vector<std::string_view> parts = distckpt::FuzzParts(data, size, 9);
  const std::string item = distckpt::ZipToString([&](distckpt::ZipWriter& zip) {
    zip.AddRecord("data.pkl", parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) {
      if (!parts[i].empty()) zip.AddRecord("data/" + std::to_string(i - 1), parts[i]);
    }
  });
  distckpt::SetUnknownGlobalPolicy(size % 2 ? distckpt::UnknownGlobalPolicy::kRefuse
                                            : distckpt::UnknownGlobalPolicy::kCarry);
  try {
    distckpt::ZipReader zip(item, "__0_0.distcp: object 'common_state/shard_0_1'");
    for (const distckpt::ZipReader::Entry& e : zip.entries()) zip.ReadRecord(e);
    nlohmann::json value = distckpt::TorchLoadJson(zip);
    if (value.is_array() && !value.empty()) value = std::move(value[0]);
    const std::string again = distckpt::TorchSaveJson(value);
    distckpt::TorchLoadJson(distckpt::ZipReader(again, "re-saved"));
    if (verbose) fprintf(stderr, "read: %s\n", value.dump().substr(0, 200).c_str());
  } catch (const distckpt::CheckpointError& e) {
    if (verbose) fprintf(stderr, "refused: %s\n", e.what());
  }
  distckpt::TakeUnknownGlobalNotes();  // as a command takes them after each file
  return 0;
}
