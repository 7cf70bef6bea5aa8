// distckpt export: flags parsed in main.cc; the work is the library's
// (interop/hf/export.h, interop/fsdp_dtensor_export.h, interop/convert.h).
#include "interop/hf/export.h"

#include <fmt/format.h>

#include <iostream>

#include "cli/hf.h"
#include "core/error.h"
#include "interop/convert.h"
#include "interop/fsdp_dtensor_export.h"

namespace distckpt {

int ExportCommand(const ExportArgs& args) {
  if (args.to == "hf") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument, "export --to hf needs --spec (the model's fields)");
    }
    ExportSummary s = ExportToHf(args);
    std::cout << fmt::format(
        "exported {} tensors ({} bytes) from {} to {}: {} file(s), largest tensor {} bytes{}\n",
        s.tensors, s.total_bytes, args.checkpoint, args.out, s.files, s.largest_tensor_bytes,
        s.architecture.empty() ? "" : ", architecture " + s.architecture);
    const ExportAccount& a = s.account;
    std::cout << fmt::format(
        "model tensors: {} stored ({} bytes): {} bytes exported, {} bytes vocab padding, {} bytes "
        "dropped (--drop); skipped: {} optimizer tensors, {} objects (rng_state, _extra_state, "
        "common state: not weights)\n",
        a.model_tensors, a.model_bytes, a.exported_bytes, a.padding_bytes, a.dropped_bytes,
        a.optimizer_tensors, s.objects_skipped);
    for (const std::string& p : a.padding) std::cout << "  padding: " << p << "\n";
    for (const std::string& d : a.dropped) std::cout << "  dropped: " << d << "\n";
    return 0;  // kExitOk
  }
  if (args.to == "fsdp-dtensor") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument,
           "export --to fsdp-dtensor needs --spec (the model's fields) and --topology dp=N[,tp=T]");
    }
    FsdpDtensorExportSummary s = ExportToFsdpDtensor(args);
    std::cout << fmt::format(
        "exported {} to {} (fsdp-dtensor, {} ranks): {} model tensors, {} optimizer tensors, {} "
        "chunks, {} bytes written; {} objects not exported\n",
        args.checkpoint, args.out, s.ranks, s.model_tensors, s.optimizer_tensors, s.chunks,
        s.bytes_written, s.objects_dropped);
    return 0;  // kExitOk
  }
  ConvertSummary s = ConvertCheckpoint(args.checkpoint, args.out, FormatByName(args.to));
  std::cout << fmt::format(
      "converted {} to {} ({} format): {} tensors, {} objects, {} bytes written, largest tensor {} "
      "bytes\n",
      args.checkpoint, args.out, args.to, s.tensors, s.objects, s.bytes_written,
      s.largest_tensor_bytes);
  return 0;  // kExitOk
}

}  // namespace distckpt
