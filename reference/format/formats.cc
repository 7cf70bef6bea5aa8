// The formats this build knows: the one file of format/ that names the
// formats under it (format.h declares AllFormats, FormatByName and
// DetectFormat; format.cc holds what every format shares).
#include <string>

#include "core/error.h"
#include "format/dcp/dcp_format.h"
#include "format/format.h"
#include "format/zarr/zarr_format.h"

namespace distckpt {
namespace {

std::string FormatNames() {
  std::string names;
  for (const Format* format : AllFormats()) {
    if (!names.empty()) names += ", ";
    names += format->name();
  }
  return names;
}

}  // namespace

const std::vector<const Format*>& AllFormats() {
  // New formats are added here; detection tries them in order ("dcp" reads
  // every DCP checkpoint, so "dcp-1.13", "dcp-common-pt" and "fsdp-dtensor"
  // are only ever chosen by name; "zarr", Megatron's legacy backend, is read only).
  static const std::vector<const Format*> formats = {
      &NativeFormat(),          &DcpFormat(DcpTarget::kTorch2), &DcpFormat(DcpTarget::kTorch113),
      &DcpFormatWithCommonPt(), &FsdpDtensorFormat(),           &ZarrFormat()};
  return formats;
}

const Format& FormatByName(std::string_view name) {
  for (const Format* format : AllFormats()) {
    if (format->name() == name) return *format;
  }
  Fail(ErrorKind::kInvalidArgument, "unknown checkpoint format '{}' (known: {})", name,
       FormatNames());
}

const Format& DetectFormat(Env* env, const std::string& dir) {
  if (!env->IsDirectory(dir))
    Fail(ErrorKind::kIncomplete, "Checkpoint directory {} does not exist", dir);
  for (const Format* format : AllFormats()) {
    if (format->Detect(env, dir)) return *format;
  }
  Fail(ErrorKind::kIncomplete,
       "{} is not a distributed checkpoint (no committed checkpoint of a known format: {})", dir,
       FormatNames());
}

}  // namespace distckpt
