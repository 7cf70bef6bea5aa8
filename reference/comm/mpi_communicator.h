// Open MPI backend: one rank per process. MpiSession initialises MPI (thread
// level MPI_THREAD_MULTIPLE if available, else SERIALIZED) and finalises it.
//
// Thread-safety: a communicator is used by one thread at a time.
#ifndef DISTCKPT_COMM_MPI_COMMUNICATOR_H_
#define DISTCKPT_COMM_MPI_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace distckpt {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);  // MPI_Init_thread unless already initialised
  ~MpiSession();                        // MPI_Finalize if this session initialised
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_mpi_ = false;  // this session called MPI_Init_thread
};

// True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE set).
bool LaunchedByMpirun();
// The world communicator; MPI must be initialised.
std::unique_ptr<Communicator> MpiWorld();

// Largest message one MPI call carries (default 1 GiB); larger payloads go in
// several calls. Tests lower it to exercise the chunked paths.
void SetMpiMaxMessageBytesForTesting(std::size_t bytes);

}  // namespace distckpt

#endif  // DISTCKPT_COMM_MPI_COMMUNICATOR_H_
