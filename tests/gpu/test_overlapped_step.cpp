// The optimizer step beside the passes (train/cuda/overlapped_step.h): the norm summed layer by layer as the
// backward pass reports layers done equals one pass over all gradients up to fp32 rounding (layers never
// reported are summed in line), the layer-by-layer update on its own stream equals one AdamW call over every slot
// bit for bit (round-to-nearest precisions), and the zeroing follows it.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/grad_norm.h"
#include "moetune/train/cuda/overlapped_step.h"

namespace moetune {
namespace {

using ops::cuda::AdamWSlot;
using ops::cuda::OptimizerPrecision;
using testing::random_normal;

class OverlappedStepGpu : public testing::GpuTest {};

float read_scalar(const Tensor& t) { return t.to(Device::cpu()).data<float>()[0]; }

AdamWSlot copy_of(const AdamWSlot& s) {
  const auto clone = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
  return {clone(s.param), clone(s.grad), clone(s.exp_avg), clone(s.exp_avg_sq), clone(s.master)};
}

TEST_F(OverlappedStepGpu, MatchesOnePassAndOneUpdateCall) {
  const auto positive = [&](const Shape& shape, DType dtype) {  // a second moment
    Tensor values = random_normal(shape, DType::F32, Device::cpu(), rng(), 1e-3f);
    for (int64_t i = 0; i < values.numel(); ++i) values.data<float>()[i] *= values.data<float>()[i];
    return ops::cast(values, dtype).to(Device::cuda());
  };
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const std::vector<std::string> names = {"model.embed_tokens.weight", "model.layers.0.self_attn.o_proj.weight",
                                          "model.layers.0.mlp.experts.down_proj", "model.layers.1.input_layernorm.weight",
                                          "model.norm.weight", "lm_head.weight"};
  const std::vector<Shape> shapes = {{1000, 64}, {257, 33}, {8, 96, 130}, {64}, {64}, {1000, 64}};
  for (OptimizerPrecision precision : {OptimizerPrecision::PureBf16, OptimizerPrecision::Fp32Master}) {
    const bool master = precision == OptimizerPrecision::Fp32Master;
    const DType moment = master ? DType::F32 : DType::BF16;
    std::vector<AdamWSlot> slots, reference;
    std::vector<Tensor> grads;
    for (const Shape& shape : shapes) {
      AdamWSlot slot{random_normal(shape, DType::BF16, Device::cuda(), rng()),
                     random_normal(shape, DType::BF16, Device::cuda(), rng(), 0.1f),
                     random_normal(shape, moment, Device::cuda(), rng(), 0.01f),
                     positive(shape, moment),
                     master ? random_normal(shape, DType::F32, Device::cuda(), rng()) : Tensor()};
      grads.push_back(slot.grad);
      reference.push_back(copy_of(slot));
      slots.push_back(std::move(slot));
    }
    train::cuda::OverlappedStep overlapped(slots, names, /*num_layers=*/2);

    const Tensor expected = Tensor::empty({1}, DType::F32, Device::cuda());
    ops::cuda::grad_norm_squared(grads, expected);
    for (bool report_all : {true, false}) {
      SCOPED_TRACE(report_all ? "every layer reported" : "layer 1 and the embedding not reported");
      for (int64_t layer : {int64_t(2), int64_t(1), int64_t(0), int64_t(-1)})
        if (report_all || layer == 2 || layer == 0) overlapped.layer_done(layer);
      const Tensor norm_squared = testing::poisoned({1}, DType::F32, Device::cuda());
      overlapped.norm_squared(norm_squared);
      EXPECT_NEAR(read_scalar(norm_squared), read_scalar(expected), 1e-5 * read_scalar(expected));
    }

    const Tensor scale = Tensor::from_vector(std::vector<float>{0.7f}, {1}).to(Device::cuda());
    const ops::cuda::AdamWHyper hyper{1e-3, 0.9, 0.999, 1e-8, 0.1, 3};
    ops::cuda::adamw_step(reference, hyper, precision, scale, 7);
    overlapped.step(hyper, precision, scale, 7, false, [&] {
      for (const Tensor& g : grads) zero_bytes(g.raw_data(), g.device(), g.nbytes());
    });
    overlapped.wait_for_all();
    for (size_t i = 0; i < slots.size(); ++i) {
      SCOPED_TRACE(names[i]);
      EXPECT_TRUE(slots[i].param.to(Device::cpu()).same_bytes(reference[i].param.to(Device::cpu())));
      EXPECT_TRUE(slots[i].exp_avg.to(Device::cpu()).same_bytes(reference[i].exp_avg.to(Device::cpu())));
      EXPECT_TRUE(slots[i].exp_avg_sq.to(Device::cpu()).same_bytes(reference[i].exp_avg_sq.to(Device::cpu())));
      if (master) {
        EXPECT_TRUE(slots[i].master.to(Device::cpu()).same_bytes(reference[i].master.to(Device::cpu())));
      }
    }
    const Tensor after = Tensor::empty({1}, DType::F32, Device::cuda());
    ops::cuda::grad_norm_squared(grads, after);  // on the compute stream, after the wait
    EXPECT_EQ(read_scalar(after), 0.0f);
  }
}

}  // namespace
}  // namespace moetune
