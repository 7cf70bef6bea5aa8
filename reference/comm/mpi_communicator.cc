// Open MPI backend. Variable-size payloads exchange their sizes first; every
// payload travels in messages of at most max_message_bytes, so counts and
// displacements always fit MPI's int arguments whatever the payload size.
// MPI errors are returned (MPI_ERRORS_RETURN) and rethrown as kComm.
#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace distckpt {
namespace {

std::atomic<size_t> max_message_bytes{size_t{1} << 30};

void Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  Fail(ErrorKind::kComm, "{} failed: {}", call, std::string_view(text, length));
}

bool Finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void WrappingByteSum(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = static_cast<uint8_t>(a[i] + b[i]);
}

MPI_Op ToMpi(ReduceOp op, MPI_Datatype type) {
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kSum:
      break;
  }
  if (type != MPI_UINT8_T) return MPI_SUM;
  // Open MPI 4.1's AVX reduction saturates 8-bit sums instead of wrapping
  // them (open-mpi/ompi#8045), so byte sums use our own operation. Created
  // once, after MPI_Init; MPI_Finalize releases it.
  static const MPI_Op byte_sum = [] {
    MPI_Op created = MPI_OP_NULL;
    Check(MPI_Op_create(&WrappingByteSum, /*commute=*/1, &created), "MPI_Op_create");
    return created;
  }();
  return byte_sum;
}

// Calls fn(offset, count) over [0, total) in pieces of at most `piece` (>= 1).
template <typename Fn>
void ForEachPiece(size_t total, size_t piece, Fn fn) {
  for (size_t offset = 0; offset < total; offset += piece) {
    fn(offset, static_cast<int>(std::min(piece, total - offset)));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    Check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    Check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    if (owned_ && !Finalized()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranks_on_node() const override {
    // Set by Open MPI's launcher for every process; read here, not found by a
    // collective (MPI_Comm_split_type), so that asking never blocks.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int n = local ? std::atoi(local) : 1;
    return n > 0 ? n : 1;
  }

  void Barrier() override { Check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void Broadcast(std::string& bytes, int root) override {
    CheckRoot(root);
    uint64_t length = bytes.size();
    Check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast");
    if (rank_ != root) bytes.resize(length);
    ForEachPiece(length, max_message_bytes, [&](size_t offset, int count) {
      Check(MPI_Bcast(bytes.data() + offset, count, MPI_BYTE, root, comm_), "MPI_Bcast");
    });
  }

  void BroadcastBytes(std::span<std::byte> bytes, int root) override {
    CheckRoot(root);
    ForEachPiece(bytes.size(), max_message_bytes, [&](size_t offset, int count) {
      Check(MPI_Bcast(bytes.data() + offset, count, MPI_BYTE, root, comm_), "MPI_Bcast");
    });
  }

  std::vector<std::string> Gather(const std::string& bytes, int root) override {
    CheckRoot(root);
    return Collect(bytes, root);
  }

  std::vector<std::string> AllGather(const std::string& bytes) override {
    return Collect(bytes, -1);
  }

  void AllReduce(std::span<int64_t> values, ReduceOp op) override {
    Reduce(values, MPI_INT64_T, op);
  }

  void AllReduceBytes(std::span<uint8_t> values, ReduceOp op) override {
    Reduce(values, MPI_UINT8_T, op);
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    Check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
  }

 private:
  // Gather to `root`, or to every rank when root < 0. Sizes go first (to all
  // ranks, which need the largest to agree on the number of rounds); then
  // each round moves the next piece of every payload, at most
  // max_message_bytes in all.
  std::vector<std::string> Collect(const std::string& bytes, int root) {
    std::vector<uint64_t> sizes(size_);
    const uint64_t my_size = bytes.size();
    Check(MPI_Allgather(&my_size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, comm_),
          "MPI_Allgather");
    const bool receives = root < 0 || rank_ == root;
    std::vector<std::string> out(receives ? size_ : 0);
    for (size_t r = 0; r < out.size(); ++r) out[r].reserve(sizes[r]);
    const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    const size_t per_rank = std::max<size_t>(1, max_message_bytes / size_);
    std::vector<int> counts(size_);
    std::vector<int> displacements(size_);
    std::string buffer;
    ForEachPiece(largest, per_rank, [&](size_t offset, int) {
      int total = 0;
      for (int r = 0; r < size_; ++r) {
        counts[r] =
            static_cast<int>(std::min<uint64_t>(per_rank, sizes[r] - std::min(sizes[r], offset)));
        displacements[r] = total;
        total += counts[r];
      }
      buffer.resize(receives ? total : 0);
      const char* piece = bytes.data() + std::min<size_t>(offset, bytes.size());
      if (root < 0) {
        Check(MPI_Allgatherv(piece, counts[rank_], MPI_BYTE, buffer.data(), counts.data(),
                             displacements.data(), MPI_BYTE, comm_),
              "MPI_Allgatherv");
      } else {
        Check(MPI_Gatherv(piece, counts[rank_], MPI_BYTE, buffer.data(), counts.data(),
                          displacements.data(), MPI_BYTE, root, comm_),
              "MPI_Gatherv");
      }
      if (!receives) return;
      for (int r = 0; r < size_; ++r) out[r].append(buffer, displacements[r], counts[r]);
    });
    return out;
  }

  template <typename T>
  void Reduce(std::span<T> values, MPI_Datatype type, ReduceOp op) {
    const size_t per_call = std::max<size_t>(1, max_message_bytes / sizeof(T));
    ForEachPiece(values.size(), per_call, [&](size_t offset, int count) {
      Check(
          MPI_Allreduce(MPI_IN_PLACE, values.data() + offset, count, type, ToMpi(op, type), comm_),
          "MPI_Allreduce");
    });
  }

  MPI_Comm comm_;
  const bool owned_;  // created by Split: freed on destruction
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return;
  // Accept whatever thread level the library provides: a communicator is only
  // ever used by one thread at a time.
  int provided = 0;
  Check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  owns_mpi_ = true;
}

MpiSession::~MpiSession() {
  if (owns_mpi_ && !Finalized()) MPI_Finalize();
}

bool LaunchedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::unique_ptr<Communicator> MpiWorld() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised || Finalized()) {
    Fail(ErrorKind::kComm, "MPI is not initialised: create an MpiSession before MpiWorld()");
  }
  Check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, /*owned=*/false);
}

void SetMpiMaxMessageBytesForTesting(size_t bytes) {
  max_message_bytes = std::clamp<size_t>(bytes, 1, INT_MAX);
}

}  // namespace distckpt
