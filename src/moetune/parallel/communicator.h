// Collectives between the ranks of a job. One interface, three transports: a single process (every
// collective is a copy), MPI between CPU processes (what the CPU engine and CI use) and NCCL between GPUs.
// Tensors live where the transport works: host memory for MPI, the GPU for NCCL; every rank of the
// communicator calls every collective in the same order with the same shapes (they block until all have).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string transport() const = 0;  // "single", "mpi", "nccl"

  // In place: every rank ends with the element-wise sum over the ranks.
  virtual void all_reduce_sum(Tensor& tensor) = 0;
  // input [size · n] -> output [n]: block `rank()` of the element-wise sum over the ranks. NCCL: in place when
  // output is input's block rank(); MPI: output apart from input.
  virtual void reduce_scatter_sum(const Tensor& input, Tensor& output) = 0;
  // input [n] -> output [size · n], rank r's input at block r. NCCL: in place when input is output's block
  // rank(); MPI: input apart from output.
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // Rows (the first dimension) between every pair of ranks: send's rows are grouped by destination,
  // send_rows[r] of them for rank r in rank order; recv gets recv_rows[r] rows from rank r, in rank order.
  virtual void all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                               const std::vector<int64_t>& recv_rows) = 0;

  // Small host values (counts, losses): the same collectives on std::vector.
  virtual std::vector<double> all_reduce_sum(std::vector<double> values) = 0;
  // values [size · n]: block r goes to rank r; returns [size · n], block r from rank r.
  virtual std::vector<int64_t> all_to_all(const std::vector<int64_t>& values) = 0;
  virtual void barrier() = 0;

  // The ranks that pass the same `color`, ordered by their rank here (MPI_Comm_split's rule).
  virtual std::unique_ptr<Communicator> split(int color) = 0;
};

// The elements of one row (the first dimension) of an all-to-all's tensor, from its shape: a tensor with no
// rows still has rows of that size (a rank may have nothing to send yet receive).
inline int64_t elements_per_row(const Tensor& t) {
  return t.dim() > 1 ? shape_numel(Shape(t.shape().begin() + 1, t.shape().end())) : 1;
}

// A job of one process: every collective is the identity.
std::unique_ptr<Communicator> single_process_communicator();

}  // namespace moetune::parallel
