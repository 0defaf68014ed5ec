// The CPU transport: MPI (OpenMPI from Debian) between processes started by mpirun or srun. Tensors are host
// memory; counts above int's range are sent in chunks.
#include <mpi.h>

#include <algorithm>
#include <climits>

#include "moetune/core/error.h"
#include "moetune/parallel/communicator.h"
#include "moetune/parallel/world.h"

namespace moetune::parallel {
namespace {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("{} failed: {}", call, std::string(text, size_t(length)));
}

MPI_Datatype mpi_type(const Tensor& t) {
  MOETUNE_CHECK(t.device().is_cpu(), "MPI collectives take host tensors, got {}", t.str());
  switch (t.dtype()) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I64: return MPI_INT64_T;
    case DType::I32: return MPI_INT32_T;
    default: fail("MPI collectives: no MPI type for {}", t.str());
  }
}

// MPI counts are ints: the element-wise collectives walk long tensors in runs that fit.
constexpr int64_t kMaxRun = INT_MAX / 2;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "mpi"; }

  void all_reduce_sum(Tensor& tensor) override {
    const MPI_Datatype type = mpi_type(tensor);
    char* data = static_cast<char*>(tensor.raw_data());
    for (int64_t begin = 0; begin < tensor.numel(); begin += kMaxRun) {
      const int64_t count = std::min(kMaxRun, tensor.numel() - begin);
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + size_t(begin) * dtype_size(tensor.dtype()), int(count), type, MPI_SUM, comm_),
                "MPI_Allreduce");
    }
  }

  void reduce_scatter_sum(const Tensor& input, Tensor& output) override {
    MOETUNE_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                  "reduce_scatter_sum: {} in, {} out on {} ranks", input.str(), output.str(), size_);
    MOETUNE_CHECK(output.numel() <= kMaxRun, "reduce_scatter_sum: {} elements per rank is above MPI's limit", output.numel());
    check_mpi(MPI_Reduce_scatter_block(input.raw_data(), output.raw_data(), int(output.numel()), mpi_type(input), MPI_SUM, comm_),
              "MPI_Reduce_scatter_block");
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    MOETUNE_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype(),
                  "all_gather: {} in, {} out on {} ranks", input.str(), output.str(), size_);
    MOETUNE_CHECK(input.numel() <= kMaxRun, "all_gather: {} elements per rank is above MPI's limit", input.numel());
    const MPI_Datatype type = mpi_type(input);
    check_mpi(MPI_Allgather(input.raw_data(), int(input.numel()), type, output.raw_data(), int(input.numel()), type, comm_),
              "MPI_Allgather");
  }

  void all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override {
    MOETUNE_CHECK(send_rows.size() == size_t(size_) && recv_rows.size() == size_t(size_),
                  "all_to_all_rows: {} send and {} receive counts for {} ranks", send_rows.size(), recv_rows.size(), size_);
    MOETUNE_CHECK(send.dtype() == recv.dtype() && send.device().is_cpu() && recv.device().is_cpu(),
                  "all_to_all_rows: {} to {}", send.str(), recv.str());
    // From the shape, not numel / rows: a rank with no rows to send still receives full rows (EP's return trip
    // to a rank whose experts no token chose), and every rank's row type must have the same size.
    const int64_t row_elements = elements_per_row(send);
    // Rows as one MPI type, so the counts are rows and stay small.
    MPI_Datatype row;
    check_mpi(MPI_Type_contiguous(int(row_elements * int64_t(dtype_size(send.dtype()))), MPI_BYTE, &row), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&row), "MPI_Type_commit");
    const size_t ranks = static_cast<size_t>(size_);
    std::vector<int> send_counts(ranks), send_displs(ranks), recv_counts(ranks), recv_displs(ranks);
    int64_t send_at = 0, recv_at = 0;
    for (size_t r = 0; r < size_t(size_); ++r) {
      send_counts[r] = int(send_rows[r]);
      send_displs[r] = int(send_at);
      recv_counts[r] = int(recv_rows[r]);
      recv_displs[r] = int(recv_at);
      send_at += send_rows[r];
      recv_at += recv_rows[r];
    }
    MOETUNE_CHECK(send_at * row_elements <= send.numel() && recv_at * row_elements <= recv.numel(),
                  "all_to_all_rows: {} rows out of {}, {} rows into {}", send_at, send.str(), recv_at, recv.str());
    const int code = MPI_Alltoallv(send.raw_data(), send_counts.data(), send_displs.data(), row, recv.raw_data(),
                                   recv_counts.data(), recv_displs.data(), row, comm_);
    MPI_Type_free(&row);
    check_mpi(code, "MPI_Alltoallv");
  }

  std::vector<double> all_reduce_sum(std::vector<double> values) override {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
    return values;
  }

  std::vector<int64_t> all_to_all(const std::vector<int64_t>& values) override {
    MOETUNE_CHECK(values.size() % size_t(size_) == 0, "all_to_all: {} values for {} ranks", values.size(), size_);
    std::vector<int64_t> received(values.size());
    const int block = int(values.size() / size_t(size_));
    check_mpi(MPI_Alltoall(values.data(), block, MPI_INT64_T, received.data(), block, MPI_INT64_T, comm_), "MPI_Alltoall");
    return received;
  }

  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

  std::unique_ptr<Communicator> split(int color) override {
    MPI_Comm sub;
    check_mpi(MPI_Comm_split(comm_, color, rank_, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> mpi_world_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Finalised at exit, after every communicator is gone (they are freed before main returns).
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

void mpi_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace moetune::parallel

namespace moetune::parallel {

std::string mpi_broadcast_bytes(const std::string& bytes) {
  uint64_t size = bytes.size();
  check_mpi(MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string received = bytes;
  received.resize(size);
  check_mpi(MPI_Bcast(received.data(), int(size), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return received;
}

}  // namespace moetune::parallel
