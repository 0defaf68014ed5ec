#include "moetune/parallel/timed_communicator.h"

#include <chrono>

namespace moetune::parallel {
namespace {

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<CommunicationClock> clock)
      : inner_(std::move(inner)), clock_(std::move(clock)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string transport() const override { return inner_->transport(); }
  void all_reduce_sum(Tensor& tensor) override {
    time([&] { inner_->all_reduce_sum(tensor); });
  }
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override {
    time([&] { inner_->reduce_scatter_sum(input, output); });
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    time([&] { inner_->all_gather(input, output); });
  }
  void all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override {
    time([&] { inner_->all_to_all_rows(send, send_rows, recv, recv_rows); });
  }
  std::vector<double> all_reduce_sum(std::vector<double> values) override {
    time([&] { values = inner_->all_reduce_sum(std::move(values)); });
    return values;
  }
  std::vector<int64_t> all_to_all(const std::vector<int64_t>& values) override {
    std::vector<int64_t> received;
    time([&] { received = inner_->all_to_all(values); });
    return received;
  }
  void barrier() override {
    time([&] { inner_->barrier(); });
  }
  std::unique_ptr<Communicator> split(int color) override { return timed(inner_->split(color), clock_); }

 private:
  template <typename Work>
  void time(Work&& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    clock_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<CommunicationClock> clock_;
};

}  // namespace

std::unique_ptr<Communicator> timed(std::unique_ptr<Communicator> inner, std::shared_ptr<CommunicationClock> clock) {
  return std::make_unique<TimedCommunicator>(std::move(inner), std::move(clock));
}

}  // namespace moetune::parallel
