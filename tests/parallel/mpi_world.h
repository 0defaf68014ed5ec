// The world of the MPI test binary (tests/parallel/test_parallel_mpi.cpp's main sets it), shared by its files.
#pragma once

#include <memory>

#include "moetune/parallel/communicator.h"

namespace moetune {
extern std::shared_ptr<parallel::Communicator> g_world;
}  // namespace moetune
