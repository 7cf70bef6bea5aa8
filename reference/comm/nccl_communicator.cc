#include "comm/nccl_communicator.h"

#include "core/error.h"

#ifdef DISTCKPT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#endif

namespace distckpt {

#ifdef DISTCKPT_HAVE_NCCL
namespace {

void CheckNccl(ncclResult_t result, std::string_view what) {
  if (result == ncclSuccess) return;
  Fail(ErrorKind::kComm, "NCCL: {} failed: {}", what, ncclGetErrorString(result));
}

void CheckCuda(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  Fail(ErrorKind::kComm, "NCCL communicator: {} failed: {}", what, cudaGetErrorString(status));
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Before this process's first NCCL call: if another rank of `base` on this
// host uses the same device, give this process its own NCCL_HOSTID.
void SeparateRanksSharingADevice(Communicator& base, const Device& device) {
  static bool done = false;  // NCCL reads its environment once per process
  std::string mine = HostName() + "/" + std::to_string(device.index);
  std::vector<std::string> all = base.AllGather(mine);
  if (done) return;
  done = true;
  const bool shared = std::count(all.begin(), all.end(), mine) > 1;
  if (shared && std::getenv("NCCL_HOSTID") == nullptr) {
    std::string id = mine + "/pid" + std::to_string(getpid());
    setenv("NCCL_HOSTID", id.c_str(), 0);
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> base, const Device& device)
      : base_(std::move(base)), device_(device) {
    CheckDeviceUsable(device_);
    if (CudaSimulated()) {
      Fail(ErrorKind::kUnsupported,
           "NCCL needs a real CUDA device (DISTCKPT_SIMULATE_CUDA is set)");
    }
    SeparateRanksSharingADevice(*base_, device_);
    CheckCuda(cudaSetDevice(device_.index), "cudaSetDevice");
    ncclUniqueId id;
    std::string bytes;
    if (base_->rank() == 0) {
      CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    base_->Broadcast(bytes, 0);
    if (bytes.size() != sizeof(id)) {
      Fail(ErrorKind::kComm, "NCCL bootstrap: rank 0 sent {} bytes, not an ncclUniqueId",
           bytes.size());
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
    // Every rank agrees on whether the communicator came up.
    AgreeOnOutcome(*base_, [&] {
      CheckNccl(ncclCommInitRank(&comm_, base_->size(), id, base_->rank()), "ncclCommInitRank");
      CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    });
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_.index);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  int ranks_on_node() const override { return base_->ranks_on_node(); }
  bool device_memory() const override { return true; }

  void Barrier() override { base_->Barrier(); }
  void Broadcast(std::string& bytes, int root) override { base_->Broadcast(bytes, root); }
  std::vector<std::string> Gather(const std::string& bytes, int root) override {
    return base_->Gather(bytes, root);
  }
  std::vector<std::string> AllGather(const std::string& bytes) override {
    return base_->AllGather(bytes);
  }
  void AllReduce(std::span<int64_t> values, ReduceOp op) override { base_->AllReduce(values, op); }
  void AllReduceBytes(std::span<uint8_t> values, ReduceOp op) override {
    base_->AllReduceBytes(values, op);
  }
  std::unique_ptr<Communicator> Split(int color, int key) override {
    std::unique_ptr<Communicator> part = base_->Split(color, key);
    if (!part) return nullptr;
    return std::make_unique<NcclCommunicator>(std::shared_ptr<Communicator>(std::move(part)),
                                              device_);
  }

  void BroadcastBytes(std::span<std::byte> bytes, int root) override {
    CheckRoot(root);
    if (bytes.empty()) return;  // every rank passes the same length
    CheckCuda(cudaSetDevice(device_.index), "cudaSetDevice");
    void* buffer = bytes.data();
    const bool on_device = IsDeviceMemory(bytes.data());
    if (!on_device) {
      buffer = Scratch(bytes.size());
      if (rank() == root) {
        CheckCuda(
            cudaMemcpyAsync(buffer, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_),
            "host-to-device copy");
      }
    }
    CheckNccl(ncclBroadcast(buffer, buffer, bytes.size(), ncclUint8, root, comm_, stream_),
              "ncclBroadcast");
    if (!on_device && rank() != root) {
      CheckCuda(
          cudaMemcpyAsync(bytes.data(), buffer, bytes.size(), cudaMemcpyDeviceToHost, stream_),
          "device-to-host copy");
    }
    CheckCuda(cudaStreamSynchronize(stream_), "ncclBroadcast completion");
  }

 private:
  static bool IsDeviceMemory(const void* p) {
    cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  }

  void* Scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      CheckCuda(cudaMalloc(&scratch_, bytes), "cudaMalloc of the staging buffer");
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  std::shared_ptr<Communicator> base_;
  Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> CreateNcclCommunicator(std::shared_ptr<Communicator> base,
                                                     const Device& device) {
  return std::make_unique<NcclCommunicator>(std::move(base), device);
}

#else

std::unique_ptr<Communicator> CreateNcclCommunicator(std::shared_ptr<Communicator>,
                                                     const Device& device) {
  Fail(ErrorKind::kUnsupported, "NCCL communicator on {}: this build of distckpt has no NCCL",
       device.ToString());
}

#endif

}  // namespace distckpt
