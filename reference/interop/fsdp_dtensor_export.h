// export --to fsdp-dtensor: Megatron's `--ckpt-format fsdp_dtensor`
// checkpoint of a GPT checkpoint as `args.topology` (dp=N[,tp=T]; mesh
// (dp, tp), rank = d*tp + t) holds it: PlanMegatronPerLayer's tensors under
// "model.module.<name>" in float32 (the fp32 main weights:
// optimizer.state.fp32_param.* when the checkpoint has them), Adam moments
// under "optimizer.state.<P><name>.exp_avg" / ".exp_avg_sq" with
// P = "module.module.module." for a bf16/f16 model (Float16Module wraps it)
// else "module.module."; each parameter's rows split over DP as
// Megatron-FSDP's buckets (fsdp/layout.h, one bucket per layer and one for
// the rest), TP's shard cut first (Shard(tp_dim) inside); a rank with no
// rows writes nothing. Common state: the checkpoint's, plus
// checkpoint_version 3.0 and iteration 0 when absent. Objects (rng_state,
// _extra_state) are not exported. pp, cp, ep and HSDP are refused.
//
// Memory: one global tensor at a time. Thread-safety: one call per `out`.
#ifndef DISTCKPT_INTEROP_FSDP_DTENSOR_EXPORT_H_
#define DISTCKPT_INTEROP_FSDP_DTENSOR_EXPORT_H_

#include <cstddef>
#include <cstdint>

#include "interop/export_args.h"

namespace distckpt {

struct FsdpDtensorExportSummary {
  int ranks = 0;
  size_t model_tensors = 0, optimizer_tensors = 0, chunks = 0, objects_dropped = 0;
  uint64_t bytes_written = 0;
};
FsdpDtensorExportSummary ExportToFsdpDtensor(const ExportArgs& args);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_FSDP_DTENSOR_EXPORT_H_
