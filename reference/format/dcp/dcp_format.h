// The DCP format: PyTorch Distributed Checkpoint files in Megatron-Core's
// torch_dist layout (FORMAT.md beside this file). DcpFormat(kTorch2) is
// "dcp" (torch 2.x class paths in .metadata), DcpFormat(kTorch113) is
// "dcp-1.13"; both read either kind. "dcp" saves the common state as
// Megatron-Core 0.20 does, the object common_state/shard_0_1 in rank 0's
// data file; "dcp-1.13" and DcpFormatWithCommonPt() ("dcp-common-pt", torch
// 2.x otherwise) write Megatron's older common.pt. Readers take either.
//
// Save: PrepareDirectory refuses a committed DCP checkpoint unless
// `overwrite`, which stages the save in `<dir>.staging` and swaps it in at
// commit, as native does (staged_overwrite.h); it removes what an
// uncommitted save left; NewStreamWriter gives a DcpWriter per stream;
// Commit writes common.pt (unless the metadata holds the common_state
// object) and metadata.json, then `.metadata` last (temp
// file, fsync, rename, directory fsync): its presence is the commit.
// Load: Detect looks for `.metadata`; OpenReader decodes it into a
// DcpReader.
//
// FsdpDtensorFormat() is "fsdp-dtensor": the same DCP files as Megatron's
// `--ckpt-format fsdp_dtensor` (and torch's own dcp.save) lay them out:
// no common.pt and no metadata.json; the common state is one bytes item per
// top-level key (torch.save of the value) in rank 0's file `__0_<s>.distcp`
// (s: the first stream no writer used), placed at planner_data path (key,).
// Tensors are stored as the ranks hold them (uneven FSDP chunks, empty
// shards write nothing). Detection picks "dcp" for reading, which reads it.
//
// Thread-safety: stateless.
#ifndef DISTCKPT_FORMAT_DCP_DCP_FORMAT_H_
#define DISTCKPT_FORMAT_DCP_DCP_FORMAT_H_

#include "format/dcp/dcp_metadata.h"
#include "format/format.h"

namespace distckpt {

// Megatron's torch_dist files, or plain DCP (fsdp_dtensor, torch's dcp.save).
enum class DcpLayoutKind { kTorchDist, kPlain };

const Format& DcpFormat(DcpTarget target = DcpTarget::kTorch2);
const Format& DcpFormatWithCommonPt();
const Format& FsdpDtensorFormat();

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_FORMAT_H_
