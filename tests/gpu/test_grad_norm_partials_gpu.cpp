// The gradient norm in two parts (ops/cuda/grad_norm.h): partials of any subset of the gradients, in any order,
// over any number of launches and streams, then the sum, give grad_norm_squared's bits over the whole list.
// That is what lets the engine start the partials layer by layer in the backward pass
// (train/cuda/overlapped_grad_norm.h) without changing the clipped step.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"
#include "moetune/ops/cuda/grad_norm.h"

namespace moetune {
namespace {

class GradNormPartialsGpu : public testing::GpuTest {};

// Tensors of one slot, of several (with a short last one), of none, misaligned views, and more than one
// launch's table holds.
std::vector<Tensor> gradients(std::mt19937& rng) {
  constexpr int64_t kSlot = int64_t(1) << 17;
  std::vector<int64_t> sizes = {3 * kSlot + 5, kSlot, kSlot - 1, kSlot + 1, 0, 1, 7, 8, 9, 1000003};
  std::uniform_int_distribution<int64_t> small(1, 3000);
  for (int i = 0; i < 1100; ++i) sizes.push_back(small(rng));
  std::vector<Tensor> grads;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool misaligned = i % 13 == 3;
    Tensor g = Tensor::zeros({sizes[i] + 1}, DType::BF16, Device::cuda()).flat_slice(misaligned ? 1 : 0, {sizes[i]});
    g.copy_from(testing::random_normal({sizes[i]}, DType::BF16, Device::cpu(), rng, 1e-2f));
    grads.push_back(g);
  }
  return grads;
}

Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

TEST_F(GradNormPartialsGpu, AnySplitGivesTheWholePassBits) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const std::vector<Tensor> grads = gradients(rng());
  const Tensor whole = testing::poisoned({1}, DType::F32, Device::cuda());
  ops::cuda::grad_norm_squared(grads, whole);

  std::vector<int64_t> first_slots;
  int64_t slots = 0;
  for (const Tensor& g : grads) {
    first_slots.push_back(slots);
    slots += ops::cuda::grad_norm_slots(g);
  }
  EXPECT_EQ(ops::cuda::grad_norm_slots(grads[0]), 4);
  EXPECT_EQ(ops::cuda::grad_norm_slots(grads[4]), 0);

  cudaStream_t side = nullptr;
  gpu::check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    // A random split into groups, started in a random order, alternately on a side stream and the engine's.
    std::vector<size_t> order(grads.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), rng());
    const Tensor partials = testing::poisoned({slots}, DType::F32, Device::cuda());
    gpu::synchronize("the poisoned partials");
    std::uniform_int_distribution<size_t> group_size(1, round == 0 ? 1 : 400);
    bool on_side = false;
    for (size_t begin = 0; begin < order.size();) {
      const size_t end = std::min(order.size(), begin + group_size(rng()));
      std::vector<Tensor> group;
      std::vector<int64_t> group_slots;
      for (size_t k = begin; k < end; ++k) {
        group.push_back(grads[order[k]]);
        group_slots.push_back(first_slots[order[k]]);
      }
      if (on_side) {
        const gpu::StreamScope scope(side);
        ops::cuda::grad_norm_partials(group, group_slots, partials);
      } else {
        ops::cuda::grad_norm_partials(group, group_slots, partials);
      }
      on_side = !on_side;
      begin = end;
    }
    gpu::check(cudaStreamSynchronize(side), "the side stream");
    const Tensor split = testing::poisoned({1}, DType::F32, Device::cuda());
    ops::cuda::grad_norm_sum_partials(partials, split);
    EXPECT_TRUE(host(split).same_bytes(host(whole)))
        << host(split).data<float>()[0] << " vs " << host(whole).data<float>()[0];
  }
  cudaStreamDestroy(side);

  // And the whole pass against a double sum on the host.
  double expected = 0;
  for (const Tensor& g : grads) {
    const Tensor f = testing::to_cpu_f32(g);
    for (int64_t i = 0; i < f.numel(); ++i) expected += double(f.data<float>()[i]) * f.data<float>()[i];
  }
  EXPECT_NEAR(host(whole).data<float>()[0], expected, 1e-5 * expected);
}

TEST_F(GradNormPartialsGpu, RejectsSlotsOutsideThePartials) {
  const Tensor g = Tensor::zeros({(int64_t(1) << 17) + 1}, DType::BF16, Device::cuda());
  const Tensor partials = Tensor::zeros({2}, DType::F32, Device::cuda());
  EXPECT_NO_THROW(ops::cuda::grad_norm_partials({g}, {0}, partials));
  EXPECT_THROW(ops::cuda::grad_norm_partials({g}, {1}, partials), Error);
  EXPECT_THROW(ops::cuda::grad_norm_partials({g}, {-1}, partials), Error);
  EXPECT_THROW(ops::cuda::grad_norm_partials({g}, {}, partials), Error);
  EXPECT_THROW(ops::cuda::grad_norm_partials({g}, {0}, Tensor::zeros({2}, DType::BF16, Device::cuda())), Error);
  EXPECT_THROW(ops::cuda::grad_norm_sum_partials(partials, Tensor::zeros({2}, DType::F32, Device::cuda())), Error);
}

}  // namespace
}  // namespace moetune
