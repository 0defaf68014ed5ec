// The untied LM head's gradient written by a step's first backward pass instead of zeroed and added to
// (model/cuda/causal_lm.h set_head_gradient_written; ops/cuda/linear_cross_entropy.h write_dweight). It must give
// the bits of the path before: the op's d(W) with beta 0 on its first chunk against beta 1 into zeros, at small
// sizes and at Moonlight's (so that cuBLASLt's algorithms for the real problem are the ones compared), and the
// model's gradients and a few AdamW steps' parameters with it on and off, one and two micro-batches a step,
// untied and tied heads (a tied head is never written), an evaluation pass between the steps, recomputation.
// Values are compared, not bytes: beta 0 may give −0 where +0 + −0 gives +0, and the two are the same number
// (AdamW makes the same parameter of either).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_tiled_random.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/linear_cross_entropy.h"
#include "moetune/ops/loss.h"
#include "test_util.h"

namespace moetune {
namespace {

using testing::poisoned;
using testing::random_normal;

class HeadGradientWrittenGpu : public testing::GpuTest {};

// How many elements of two float tensors (BF16 or F32, any device) differ in value: bits equal, or both zeros.
int64_t differing_values(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.dtype(), expected.dtype());
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) return -1;
  const Tensor a = actual.to(Device::cpu()), b = expected.to(Device::cpu());
  if (std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0) return 0;
  int64_t differing = 0;
  const auto count = [&](const auto* x, const auto* y, auto magnitude_mask) {
    for (int64_t i = 0; i < a.numel(); ++i)
      if (x[i] != y[i] && ((x[i] & magnitude_mask) != 0 || (y[i] & magnitude_mask) != 0)) ++differing;
  };
  if (a.dtype() == DType::BF16)
    count(static_cast<const uint16_t*>(a.raw_data()), static_cast<const uint16_t*>(b.raw_data()), uint16_t(0x7fff));
  else
    count(static_cast<const uint32_t*>(a.raw_data()), static_cast<const uint32_t*>(b.raw_data()), uint32_t(0x7fffffff));
  return differing;
}

bool all_zero(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* bytes = static_cast<const uint8_t*>(host.raw_data());
  for (size_t i = 0; i < host.nbytes(); ++i)
    if (bytes[i] != 0) return false;
  return true;
}

Tensor device_targets(int64_t rows, int64_t vocab, double ignored_fraction, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
  std::bernoulli_distribution ignored(ignored_fraction);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < rows; ++r) ids.push_back(ignored(rng) ? int32_t(ops::kIgnoreIndex) : token(rng));
  return Tensor::from_vector<int32_t>(ids, {rows}).to(Device::cuda());
}

// The op at one chunk height: write_dweight into a poisoned gradient, then a second pass adding, against
// adding twice into zeros; d(hidden) and the loss are the same call's either way.
void expect_written_as_added(const Tensor& hidden, const Tensor& weight, const Tensor& targets, int64_t chunk,
                             DType dweight_type) {
  SCOPED_TRACE(::testing::Message() << "rows " << hidden.size(0) << " vocab " << weight.size(0) << " chunk " << chunk
                                    << " dweight " << dtype_name(dweight_type));
  const int64_t rows = hidden.size(0);
  const double scale = 1.0 / double(rows);
  const Shape shape = weight.shape();
  const Tensor added = Tensor::zeros(shape, dweight_type, Device::cuda());
  const Tensor written = poisoned(shape, dweight_type, Device::cuda());
  const Tensor added_dhidden = Tensor::empty(hidden.shape(), DType::BF16, Device::cuda());
  const Tensor written_dhidden = Tensor::empty(hidden.shape(), DType::BF16, Device::cuda());
  const Tensor added_loss = Tensor::zeros({1}, DType::F32, Device::cuda());
  const Tensor written_loss = Tensor::zeros({1}, DType::F32, Device::cuda());
  ops::cuda::linear_cross_entropy(hidden, weight, targets, scale, added_loss, added_dhidden, added, chunk);
  ops::cuda::linear_cross_entropy(hidden, weight, targets, scale, written_loss, written_dhidden, written, chunk,
                                  /*write_dweight=*/true);
  EXPECT_EQ(differing_values(written, added), 0) << "written";
  EXPECT_EQ(differing_values(written_dhidden, added_dhidden), 0);
  EXPECT_EQ(differing_values(written_loss, added_loss), 0);
  EXPECT_FALSE(all_zero(written));
  ops::cuda::linear_cross_entropy(hidden, weight, targets, scale, added_loss, added_dhidden, added, chunk);
  ops::cuda::linear_cross_entropy(hidden, weight, targets, scale, written_loss, written_dhidden, written, chunk);
  EXPECT_EQ(differing_values(written, added), 0) << "then added";
}

TEST_F(HeadGradientWrittenGpu, OpWritesTheBitsOfAddingIntoZeros) {
  SCOPED_TRACE(seed());
  const int64_t rows = 300, width = 64, vocab = 1000;
  const Tensor hidden = random_normal({rows, width}, DType::BF16, Device::cuda(), rng());
  const Tensor weight = random_normal({vocab, width}, DType::BF16, Device::cuda(), rng(), 0.125f);
  const Tensor targets = device_targets(rows, vocab, 0.2, rng());
  for (const DType dweight_type : {DType::BF16, DType::F32})
    for (const int64_t chunk : {0, 64, 128, 256, 300})  // one chunk, several, a ragged last one
      expect_written_as_added(hidden, weight, targets, chunk, dweight_type);

  // Every row ignored: the written gradient is zeros. No rows: zeroed, not left as it was.
  const Tensor ignored = device_targets(rows, vocab, 1.0, rng());
  const Tensor written = poisoned({vocab, width}, DType::BF16, Device::cuda());
  const Tensor loss = Tensor::zeros({1}, DType::F32, Device::cuda());
  ops::cuda::linear_cross_entropy(hidden, weight, ignored, 1.0, loss, {}, written, 128, true);
  EXPECT_TRUE(all_zero(written));
  const Tensor none = poisoned({vocab, width}, DType::BF16, Device::cuda());
  ops::cuda::linear_cross_entropy(Tensor::empty({0, width}, DType::BF16, Device::cuda()), weight,
                                  Tensor::empty({0}, DType::I32, Device::cuda()), 1.0, loss, {}, none, 0, true);
  EXPECT_TRUE(all_zero(none));
}

// Moonlight's head (8192 rows, hidden 2048, vocabulary 163,840) at the chunk heights the benchmark tries: the
// 128x160-tile d(W) up to 1024 rows, the heuristic's pick above.
TEST_F(HeadGradientWrittenGpu, OpWritesTheBitsOfAddingIntoZerosAtMoonlightsShape) {
  std::mt19937 rng(11);
  const int64_t rows = 8192, width = 2048, vocab = 163840;
  const Tensor hidden = testing::tiled_random(rows, width, rng, 1.0f);
  const Tensor weight = testing::tiled_random(vocab, width, rng, 1.0f / 45.25f);
  const Tensor targets = device_targets(rows, vocab, 0.01, rng);
  for (const int64_t chunk : {768, 1024, 2048, 4096, 8192}) expect_written_as_added(hidden, weight, targets, chunk, DType::BF16);
}

// AdamW (pure bf16) over a model's trainable parameters, with moments of its own.
struct Optimizer {
  std::vector<ops::cuda::AdamWSlot> slots;
  explicit Optimizer(model::cuda::CausalLM& model) {
    const std::vector<Tensor>& values = model.parameters().values();
    const std::vector<Tensor>& grads = model.parameters().grads();
    for (size_t i = 0; i < values.size(); ++i) {
      if (!grads[i].defined()) continue;
      ops::cuda::AdamWSlot slot;
      slot.param = values[i];
      slot.grad = grads[i];
      slot.exp_avg = Tensor::zeros(values[i].shape(), DType::BF16, Device::cuda());
      slot.exp_avg_sq = Tensor::zeros(values[i].shape(), DType::BF16, Device::cuda());
      slots.push_back(slot);
    }
  }
  void step(int64_t step) {
    ops::cuda::adamw_step(slots, {0.01, 0.9, 0.999, 1e-8, 0.1, step}, ops::cuda::OptimizerPrecision::PureBf16, {},
                          /*seed=*/5);
  }
};

model::Batch batch_of(int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 48; ++i) ids.push_back((i * 7 + salt * 13 + 3) % vocab);
  const Tensor input_ids = Tensor::from_vector(ids, {2, 24});
  return model::Batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
}

// Three steps of `micro_batches` micro-batches each, with the head's gradient written (the default) and zeroed
// and added to; every gradient after every pass and every parameter after every step the same values.
void expect_same_training(const std::string& fixture, int64_t micro_batches, model::Recompute recompute) {
  SCOPED_TRACE(::testing::Message() << fixture << ", " << micro_batches << " micro-batch(es), recompute "
                                    << model::recompute_name(recompute));
  auto written = model::cuda::CausalLM::from_pretrained(testing::fixture(fixture));
  auto zeroed = model::cuda::CausalLM::from_pretrained(testing::fixture(fixture));
  zeroed.set_head_gradient_written(false);
  written.set_recompute(recompute);
  zeroed.set_recompute(recompute);
  Optimizer written_optimizer(written), zeroed_optimizer(zeroed);
  const bool tied = written.spec().tie_word_embeddings;
  const model::Param head = written.parameters().get(tied ? "embed_tokens" : "lm_head");
  ASSERT_TRUE(head.grad.defined());
  const int64_t vocab = written.spec().vocab_size;
  const auto& names = written.weights().layout.parameters;
  for (int64_t step = 1; step <= 3; ++step) {
    for (int64_t m = 0; m < micro_batches; ++m) {
      model::Batch batch = batch_of(vocab, step * 10 + m);
      batch.num_items_in_batch = 46.0 * double(micro_batches);
      const double written_loss = written.forward_backward(batch).lm_loss;
      EXPECT_EQ(written_loss, zeroed.forward_backward(batch).lm_loss) << "step " << step << " micro-batch " << m;
      for (size_t i = 0; i < names.size(); ++i) {
        const Tensor& grad = written.parameters().grads()[i];
        if (grad.defined()) {
          EXPECT_EQ(differing_values(grad, zeroed.parameters().grads()[i]), 0)
              << names[i].name << ", step " << step << " micro-batch " << m;
        }
      }
    }
    written_optimizer.step(step);
    zeroed_optimizer.step(step);
    written.zero_grad();
    zeroed.zero_grad();
    // zero_grad left the untied head's gradient alone (the next pass writes it), and those the blocks write
    // (the experts' and the projections' weight gradients: CausalLM::overwritten_gradients), and only those.
    EXPECT_EQ(all_zero(head.grad), tied) << "step " << step;
    EXPECT_TRUE(all_zero(zeroed.parameters().get(tied ? "embed_tokens" : "lm_head").grad));
    const auto overwritten = [&](const Tensor& grad) {
      return std::any_of(written.overwritten_gradients().begin(), written.overwritten_gradients().end(),
                         [&](const Tensor& o) { return o.raw_data() == grad.raw_data(); });
    };
    for (size_t i = 0; i < names.size(); ++i) {
      const Tensor& grad = written.parameters().grads()[i];
      if (grad.defined() && grad.raw_data() != head.grad.raw_data() && !overwritten(grad)) {
        EXPECT_TRUE(all_zero(grad)) << names[i].name << " after zero_grad";
      }
      EXPECT_EQ(differing_values(written.parameters().values()[i], zeroed.parameters().values()[i]), 0)
          << names[i].name << " after step " << step;
    }
    // An evaluation pass between steps reads the head and writes no gradient.
    const model::Batch held_out = batch_of(vocab, 99);
    EXPECT_EQ(written.loss(held_out).lm_loss, zeroed.loss(held_out).lm_loss);
  }
}

TEST_F(HeadGradientWrittenGpu, SameGradientsAndStepsAsZeroing) {
  for (const char* fixture : {"qwen3_moe_tiny", "deepseek_v3_tiny", "qwen3_moe_tied_bf16"})
    for (const int64_t micro_batches : {1, 2}) expect_same_training(fixture, micro_batches, model::Recompute::None);
  expect_same_training("qwen3_moe_tiny", 2, model::Recompute::Full);
}

// Turned off between zero_grad() and the step's first pass, the gradient zero_grad() left alone is zeroed then:
// the pass that adds starts from zeros.
TEST_F(HeadGradientWrittenGpu, TurnedOffAfterZeroGradStartsFromZeros) {
  auto model = model::cuda::CausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  auto fresh = model::cuda::CausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  const model::Batch batch = batch_of(model.spec().vocab_size, 1);
  model.forward_backward(batch_of(model.spec().vocab_size, 2));
  model.zero_grad();
  EXPECT_FALSE(all_zero(model.parameters().get("lm_head").grad));
  model.set_head_gradient_written(false);
  EXPECT_TRUE(all_zero(model.parameters().get("lm_head").grad));
  model.forward_backward(batch);
  fresh.forward_backward(batch);
  EXPECT_EQ(differing_values(model.parameters().get("lm_head").grad, fresh.parameters().get("lm_head").grad), 0);
}

}  // namespace
}  // namespace moetune
