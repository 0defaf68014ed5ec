// Built without MPI: a job started by an MPI launcher is refused with the reason.
#include "moetune/core/error.h"
#include "moetune/parallel/world.h"

namespace moetune::parallel {

bool mpi_available() { return false; }
std::unique_ptr<Communicator> mpi_world_communicator() { fail("this moetune was built without MPI"); }
void mpi_abort(int) {}

}  // namespace moetune::parallel

namespace moetune::parallel {
std::string mpi_broadcast_bytes(const std::string&) { fail("this moetune was built without MPI"); }
}  // namespace moetune::parallel
