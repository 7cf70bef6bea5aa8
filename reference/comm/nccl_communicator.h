// NcclCommunicator: a Communicator whose data plane is NCCL. BroadcastBytes
// moves bytes with ncclBroadcast: CUDA device memory in place, host memory
// through a device buffer of the communicator. The control collectives
// (Broadcast of messages, Gather, AllGather, AllReduce, Barrier, Split) run
// on the base communicator it was created over, which also bootstraps NCCL
// (rank 0's ncclUniqueId is broadcast over it). device_memory() is true.
//
// One GPU, several ranks: NCCL refuses two ranks of a communicator on one
// device ("Duplicate GPU detected"). When ranks of the base communicator on
// one host share a device, Create gives each process its own NCCL_HOSTID
// (unless the environment sets one) before NCCL starts, so NCCL treats them
// as separate hosts and moves bytes over its socket transport: for tests on
// single-GPU machines, not for speed.
//
// Built when NCCL is found (DISTCKPT_HAVE_NCCL); Create throws kUnsupported
// otherwise.
//
// Thread-safety: used by its own rank only, like every Communicator.
#ifndef DISTCKPT_COMM_NCCL_COMMUNICATOR_H_
#define DISTCKPT_COMM_NCCL_COMMUNICATOR_H_

#include <memory>

#include "comm/communicator.h"
#include "core/device.h"

namespace distckpt {

// Collective over `base`: every rank calls it with its own CUDA `device`.
std::unique_ptr<Communicator> CreateNcclCommunicator(std::shared_ptr<Communicator> base,
                                                     const Device& device);

}  // namespace distckpt

#endif  // DISTCKPT_COMM_NCCL_COMMUNICATOR_H_
