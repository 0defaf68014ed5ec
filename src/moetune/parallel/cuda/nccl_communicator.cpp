// The GPU transport: NCCL between the ranks' GPUs (one GPU per rank), every collective queued on the current
// stream. The unique id travels through MPI when MPI started the ranks, else through the TCP rendezvous.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"
#include "moetune/parallel/communicator.h"
#include "moetune/parallel/tcp_rendezvous.h"
#include "moetune/parallel/world.h"

namespace moetune::parallel {
namespace {

void check_nccl(ncclResult_t status, const char* call) {
  if (status != ncclSuccess) fail("{} failed: {} ({})", call, ncclGetErrorString(status), ncclGetLastError(nullptr));
}

ncclDataType_t nccl_type(const Tensor& t) {
  MOETUNE_CHECK(t.device().is_cuda(), "NCCL collectives take GPU tensors, got {}", t.str());
  switch (t.dtype()) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::I64: return ncclInt64;
    case DType::I32: return ncclInt32;
    default: fail("NCCL collectives: no NCCL type for {}", t.str());
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "nccl"; }

  void all_reduce_sum(Tensor& tensor) override {
    check_nccl(ncclAllReduce(tensor.raw_data(), tensor.raw_data(), size_t(tensor.numel()), nccl_type(tensor), ncclSum, comm_,
                             gpu::stream()),
               "ncclAllReduce");
  }
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override {
    MOETUNE_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                  "reduce_scatter_sum: {} in, {} out on {} ranks", input.str(), output.str(), size_);
    check_nccl(ncclReduceScatter(input.raw_data(), output.raw_data(), size_t(output.numel()), nccl_type(input), ncclSum, comm_,
                                 gpu::stream()),
               "ncclReduceScatter");
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    MOETUNE_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype(),
                  "all_gather: {} in, {} out on {} ranks", input.str(), output.str(), size_);
    check_nccl(ncclAllGather(input.raw_data(), output.raw_data(), size_t(input.numel()), nccl_type(input), comm_, gpu::stream()),
               "ncclAllGather");
  }
  void all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override {
    MOETUNE_CHECK(send_rows.size() == size_t(size_) && recv_rows.size() == size_t(size_) && send.dtype() == recv.dtype(),
                  "all_to_all_rows: {} to {} with {}/{} counts on {} ranks", send.str(), recv.str(), send_rows.size(),
                  recv_rows.size(), size_);
    const int64_t row = elements_per_row(send);
    MOETUNE_CHECK(elements_per_row(recv) == row, "all_to_all_rows: rows of {} and {} differ", send.str(), recv.str());
    int64_t sending = 0, receiving = 0;
    for (int peer = 0; peer < size_; ++peer) {
      sending += send_rows[size_t(peer)];
      receiving += recv_rows[size_t(peer)];
    }
    MOETUNE_CHECK(sending * row <= send.numel() && receiving * row <= recv.numel(),
                  "all_to_all_rows: {} rows to send from {}, {} to receive into {}", sending, send.str(), receiving,
                  recv.str());
    const size_t row_bytes = size_t(row) * dtype_size(send.dtype());
    const ncclDataType_t type = nccl_type(send);
    const char* from = static_cast<const char*>(send.raw_data());
    char* to = static_cast<char*>(recv.raw_data());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int peer = 0; peer < size_; ++peer) {
      if (send_rows[size_t(peer)] > 0)
        check_nccl(ncclSend(from, size_t(send_rows[size_t(peer)] * row), type, peer, comm_, gpu::stream()), "ncclSend");
      if (recv_rows[size_t(peer)] > 0)
        check_nccl(ncclRecv(to, size_t(recv_rows[size_t(peer)] * row), type, peer, comm_, gpu::stream()), "ncclRecv");
      from += size_t(send_rows[size_t(peer)]) * row_bytes;
      to += size_t(recv_rows[size_t(peer)]) * row_bytes;
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  std::vector<double> all_reduce_sum(std::vector<double> values) override {
    Tensor device = Tensor::from_vector(values, {int64_t(values.size())}).to(Device::cuda());
    all_reduce_sum(device);
    const Tensor host = device.to(Device::cpu());
    std::copy(host.data<double>(), host.data<double>() + values.size(), values.begin());
    return values;
  }
  std::vector<int64_t> all_to_all(const std::vector<int64_t>& values) override {
    MOETUNE_CHECK(values.size() % size_t(size_) == 0, "all_to_all: {} values for {} ranks", values.size(), size_);
    const int64_t block = int64_t(values.size()) / size_;
    Tensor send = Tensor::from_vector(values, {int64_t(values.size()), 1}).to(Device::cuda());
    Tensor recv = Tensor::empty({int64_t(values.size()), 1}, DType::I64, Device::cuda());
    all_to_all_rows(send, std::vector<int64_t>(size_t(size_), block), recv, std::vector<int64_t>(size_t(size_), block));
    const Tensor host = recv.to(Device::cpu());
    return std::vector<int64_t>(host.data<int64_t>(), host.data<int64_t>() + values.size());
  }
  void barrier() override {
    all_reduce_sum(std::vector<double>{0.0});
  }
  std::unique_ptr<Communicator> split(int color) override {
    ncclComm_t sub = nullptr;
    check_nccl(ncclCommSplit(comm_, color, rank_, &sub, nullptr), "ncclCommSplit");
    int rank = 0, size = 0;
    check_nccl(ncclCommUserRank(sub, &rank), "ncclCommUserRank");
    check_nccl(ncclCommCount(sub, &size), "ncclCommCount");
    return std::make_unique<NcclCommunicator>(sub, rank, size);
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> gpu_world(const LaunchInfo& launch) {
  if (launch.world_size == 1) return single_process_communicator();
  int devices = 0;
  gpu::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (launch.local_rank >= devices)
    fail("rank {} is local rank {} on its node, but this node shows {} GPU(s) (CUDA_VISIBLE_DEVICES='{}'): start at "
         "most one rank per GPU", launch.rank, launch.local_rank, devices, std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
  gpu::check(cudaSetDevice(launch.local_rank), "cudaSetDevice");
  ncclUniqueId id;
  if (launch.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::string blob(reinterpret_cast<const char*>(&id), sizeof id);
  if (launch.launcher == Launcher::Mpi) {
    mpi_world_communicator();  // initialises MPI
    blob = mpi_broadcast_bytes(blob);
  } else {
    blob = rendezvous_broadcast(launch.master_addr, launch.master_port, launch.rank, launch.world_size, blob);
  }
  std::memcpy(&id, blob.data(), sizeof id);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, launch.world_size, id, launch.rank), "ncclCommInitRank");
  auto world = std::make_unique<NcclCommunicator>(comm, launch.rank, launch.world_size);
  note_world(*world);
  return world;
}

}  // namespace moetune::parallel
