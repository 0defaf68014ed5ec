#include "moetune/core/error.h"
#include "moetune/parallel/communicator.h"

namespace moetune::parallel {
namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string transport() const override { return "single"; }
  void all_reduce_sum(Tensor&) override {}
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override { output.copy_from(input); }
  void all_gather(const Tensor& input, Tensor& output) override { output.copy_from(input); }
  void all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override {
    MOETUNE_CHECK(send_rows.size() == 1 && recv_rows.size() == 1 && send_rows[0] == recv_rows[0],
                  "all_to_all_rows on one rank: sends {} rows but receives {}", send_rows.at(0), recv_rows.at(0));
    if (send_rows[0] > 0) recv.copy_from(send);
  }
  std::vector<double> all_reduce_sum(std::vector<double> values) override { return values; }
  std::vector<int64_t> all_to_all(const std::vector<int64_t>& values) override { return values; }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int) override { return std::make_unique<SingleProcessCommunicator>(); }
};

}  // namespace

std::unique_ptr<Communicator> single_process_communicator() { return std::make_unique<SingleProcessCommunicator>(); }

}  // namespace moetune::parallel
