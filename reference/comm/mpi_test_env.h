// The MPI world of a GoogleTest binary built with distckpt_mpi_test (whose
// main, mpi_test_main.cc, initialises MPI around RUN_ALL_TESTS).
//
// Thread-safety: the communicator is used by the test thread only.
#ifndef DISTCKPT_COMM_MPI_TEST_ENV_H_
#define DISTCKPT_COMM_MPI_TEST_ENV_H_

#include "comm/communicator.h"

namespace distckpt {

// The world communicator; valid while the tests run.
Communicator& MpiTestWorld();

}  // namespace distckpt

#endif  // DISTCKPT_COMM_MPI_TEST_ENV_H_
