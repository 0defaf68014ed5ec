// optimizer.lazy_embedding (ops/cuda/adamw_rows.h): AdamW on the embedding's rows of the step's tokens only, the
// others brought up to date when read. It must be the eager update of the whole table bit for bit: the same
// losses and gradient norms step by step, and the same weights, moments (and fp32 master copy) in the training
// state and the saved model, in the middle of the run and at its end, in every precision. The batches touch
// some rows, leave them for several steps, touch them again, accumulate two micro-batches in one step, and
// evaluate in between (which reads rows outside the step's batches).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>

#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/device.h"
#include "moetune/io/safetensors.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/adamw_rows.h"
#include "moetune/ops/cuda/grad_norm.h"
#include "moetune/train/engine.h"
#include "moetune/train/recipe.h"
#include "test_util.h"

namespace moetune {
namespace {

class LazyEmbeddingGpu : public testing::GpuTest {};

// One row of tokens [first, last] (cycled to `length`), scored throughout.
model::Batch tokens_batch(const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t length = 24) {
  std::vector<int64_t> ids;
  while (int64_t(ids.size()) < length)
    for (const auto& [first, last] : ranges)
      for (int64_t id = first; id <= last && int64_t(ids.size()) < length; ++id) ids.push_back(id);
  model::Batch batch;
  batch.input_ids = Tensor::from_vector<int64_t>(ids, {1, length});
  batch.labels = Tensor::from_vector<int64_t>(ids, {1, length});
  return batch;
}

// Each step's micro-batches. Rows 1-12 are read at steps 1, 3 and 8 only; 40-60 at 2, then 7; 80-95 at 4 only;
// step 5 has two micro-batches sharing rows 20-30; evaluation (after step 5) reads 61-79, which no step reads.
std::vector<std::vector<model::Batch>> schedule() {
  return {{tokens_batch({{1, 12}, {20, 31}})},
          {tokens_batch({{40, 60}})},
          {tokens_batch({{1, 6}, {33, 38}})},
          {tokens_batch({{80, 95}})},
          {tokens_batch({{20, 30}, {14, 19}}), tokens_batch({{25, 35}})},
          {tokens_batch({{20, 39}})},
          {tokens_batch({{40, 52}, {90, 95}})},
          {tokens_batch({{1, 12}, {62, 64}})}};
}

std::string bytes_of(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Bitwise equality of two host tensors of the same name.
void expect_same_bits(const Tensor& lazy, const Tensor& eager, const std::string& what) {
  ASSERT_EQ(lazy.dtype(), eager.dtype()) << what;
  ASSERT_EQ(lazy.shape(), eager.shape()) << what;
  const auto* a = static_cast<const uint8_t*>(lazy.raw_data());
  const auto* b = static_cast<const uint8_t*>(eager.raw_data());
  const size_t bytes = lazy.nbytes();
  size_t differing = 0, first = bytes;
  for (size_t i = 0; i < bytes; ++i)
    if (a[i] != b[i]) {
      ++differing;
      if (first == bytes) first = i;
    }
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " bytes differ, the first at byte " << first;
}

void expect_same_state(const io::NamedTensors& lazy, const io::NamedTensors& eager, const std::string& when) {
  ASSERT_EQ(lazy.size(), eager.size()) << when;
  for (size_t i = 0; i < lazy.size(); ++i) {
    ASSERT_EQ(lazy[i].first, eager[i].first) << when;
    expect_same_bits(lazy[i].second, eager[i].second, when + ": " + lazy[i].first);
  }
}

struct TrainedRun {
  std::string engine_output;  // what making the engine printed
  std::vector<double> losses, grad_norms, eval_losses;
  io::NamedTensors middle_state, final_state;
};

// Trains the schedule; with `resume_from` (a training state saved after step 3), restores it and trains steps
// 4 onwards only.
TrainedRun train(const std::string& precision, const std::string& lazy, double max_grad_norm,
          const std::filesystem::path& saved, const std::filesystem::path& resume_from = {}) {
  const train::Recipe recipe = train::parse_recipe(
      "", "recipe.yaml",
      {"model=" + testing::fixture("qwen3_moe_tiny").string(), "training.device=cuda", "optimizer.precision=" + precision,
       "optimizer.lr=0.02", "optimizer.weight_decay=0.1", "optimizer.max_grad_norm=" + std::to_string(max_grad_norm),
       "optimizer.update_in_backward=off", "optimizer.lazy_embedding=" + lazy, "training.seed=77"});
  TrainedRun run;
  ::testing::internal::CaptureStderr();
  std::unique_ptr<train::TrainingEngine> engine = train::make_engine(recipe);
  run.engine_output = ::testing::internal::GetCapturedStderr();
  int64_t step = 0;
  if (!resume_from.empty()) {
    engine->restore_training_state(io::SafetensorsFile::open(resume_from), 3);
    engine->finish_restore();
  }
  for (const std::vector<model::Batch>& micro_batches : schedule()) {
    ++step;
    if (!resume_from.empty() && step <= 3) continue;
    const double lr = 0.02 * (1.0 - 0.05 * double(step));  // a schedule: each step's constants differ
    engine->begin_step(int64_t(micro_batches.size()), lr);
    double loss = 0;
    for (model::Batch batch : micro_batches) {
      batch.num_items_in_batch = 23.0 * double(micro_batches.size());
      // The cross-entropy part: the fixture's aux loss value sums router probabilities with float atomics
      // (ops/cuda/aux_loss.cu), so its last bits vary from run to run, eager or lazy alike; its gradient does not.
      loss += engine->forward_backward(batch).lm_loss;
    }
    run.losses.push_back(loss);
    run.grad_norms.push_back(engine->optimizer_step(lr, max_grad_norm));
    if (step == 5) run.eval_losses.push_back(engine->evaluate(tokens_batch({{61, 79}})).lm_loss);
    if (step == 3) {
      run.middle_state = engine->training_state();
      engine->save_pretrained(saved / "middle");
      io::save_safetensors(saved / "middle_state.safetensors", run.middle_state);
    }
  }
  run.eval_losses.push_back(engine->evaluate(tokens_batch({{1, 95}}, 95)).lm_loss);
  run.final_state = engine->training_state();
  engine->save_pretrained(saved / "final");
  return run;
}

TEST_F(LazyEmbeddingGpu, SameBitsAsTheEagerUpdate) {
  testing::ScratchDir dir;
  // Clipping on (the norm read from every gradient, the coefficient scaling each step) and off (the norm summed
  // by the step itself: the lazy rows' share must be the eager kernel's partials).
  for (const auto& [precision, max_grad_norm] : std::vector<std::pair<std::string, double>>{
           {"pure_bf16", 0.5}, {"bf16_stochastic_rounding", 0.5}, {"fp32_master", 0.5}, {"pure_bf16", 0.0},
           {"bf16_stochastic_rounding", 0.0}, {"fp32_master", 0.0}}) {
    SCOPED_TRACE(precision + (max_grad_norm > 0 ? " clipped" : " unclipped"));
    const std::string name = precision + (max_grad_norm > 0 ? "_clip" : "");
    const TrainedRun eager = train(precision, "off", max_grad_norm, dir / (name + "_eager"));
    const TrainedRun lazy = train(precision, "auto", max_grad_norm, dir / (name + "_lazy"));
    // The lazy path is taken where asked for, and only there.
    EXPECT_NE(lazy.engine_output.find("optimizer.lazy_embedding: AdamW on the input embedding's rows"), std::string::npos)
        << lazy.engine_output;
    EXPECT_EQ(eager.engine_output.find("optimizer.lazy_embedding"), std::string::npos) << eager.engine_output;
    ASSERT_EQ(lazy.losses.size(), eager.losses.size());
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      EXPECT_EQ(lazy.losses[i], eager.losses[i]) << "step " << i + 1;
      EXPECT_EQ(lazy.grad_norms[i], eager.grad_norms[i]) << "step " << i + 1;
    }
    EXPECT_EQ(lazy.eval_losses, eager.eval_losses);
    expect_same_state(lazy.middle_state, eager.middle_state, "after step 3");
    expect_same_state(lazy.final_state, eager.final_state, "at the end");
    for (const char* when : {"middle", "final"})
      for (const auto& entry : std::filesystem::directory_iterator(dir / (name + "_eager") / when)) {
        if (entry.path().extension() != ".safetensors") continue;
        EXPECT_TRUE(bytes_of(entry.path()) == bytes_of(dir / (name + "_lazy") / when / entry.path().filename()))
            << when << ": " << entry.path().filename();
      }
    // Resumed from the middle, the lazy run ends where the eager one does.
    const TrainedRun resumed = train(precision, "auto", max_grad_norm, dir / (name + "_resumed"),
                              dir / (name + "_eager") / "middle_state.safetensors");
    for (size_t i = 3; i < eager.losses.size(); ++i) EXPECT_EQ(resumed.losses[i - 3], eager.losses[i]) << "resumed, step " << i + 1;
    expect_same_state(resumed.final_state, eager.final_state, "resumed, at the end");
    // The run changed the embedding (the comparison is not of untouched tables).
    const auto embedding = [](const io::NamedTensors& state) {
      for (const auto& [tensor_name, tensor] : state)
        if (tensor_name.find("embed_tokens") != std::string::npos && tensor_name.starts_with("param.")) return tensor;
      return Tensor();
    };
    ASSERT_TRUE(embedding(eager.final_state).defined());
    EXPECT_NE(std::memcmp(embedding(eager.final_state).raw_data(), embedding(eager.middle_state).raw_data(),
                          embedding(eager.final_state).nbytes()),
              0);
  }
}

// The row kernels alone on a table of the benchmark's row width: random state, a few marked rows a step over
// many steps with varying constants and clip scales, against adamw_step on the whole table.
TEST_F(LazyEmbeddingGpu, RowKernelsMatchTheWholeTableStep) {
  const int64_t rows = 300, width = 2048;
  for (const auto precision : {ops::cuda::OptimizerPrecision::PureBf16, ops::cuda::OptimizerPrecision::Bf16Stochastic,
                               ops::cuda::OptimizerPrecision::Fp32Master}) {
    SCOPED_TRACE(int(precision));
    const bool master = precision == ops::cuda::OptimizerPrecision::Fp32Master;
    const DType moment = master ? DType::F32 : DType::BF16;
    // Two copies of the same state: a small tensor before the table, the table, one after (positions matter).
    const auto make = [&](std::mt19937 rng) {
      std::vector<ops::cuda::AdamWSlot> slots;
      for (const Shape& shape : {Shape{40, 24}, Shape{rows, width}, Shape{7, 16}}) {
        ops::cuda::AdamWSlot s;
        s.param = testing::random_normal(shape, DType::BF16, Device::cuda(), rng);
        s.grad = Tensor::zeros(shape, DType::BF16, Device::cuda());
        // Moments of either sign and size; in the table, the first third of the rows at zero (no gradient has
        // reached them yet: the update term is skipped there).
        const Tensor m = testing::random_normal(shape, DType::F32, Device::cpu(), rng, 0.01f);
        const Tensor v = testing::random_normal(shape, DType::F32, Device::cpu(), rng, 1e-3f);
        for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] *= v.data<float>()[i];
        if (shape[0] == rows)
          for (int64_t i = 0; i < (rows / 3) * width; ++i) m.data<float>()[i] = v.data<float>()[i] = 0.0f;
        s.exp_avg = ops::cast(m, moment).to(Device::cuda());
        s.exp_avg_sq = ops::cast(v, moment).to(Device::cuda());
        if (master) s.master = ops::cast(s.param, DType::F32);
        slots.push_back(s);
      }
      return slots;
    };
    std::mt19937 state_rng(seed());
    std::vector<ops::cuda::AdamWSlot> eager = make(state_rng), lazy = make(state_rng);
    ops::cuda::AdamWLazyRows table(lazy[1], 1, precision, 99);
    Tensor scale = Tensor::empty({1}, DType::F32, Device::cuda());
    std::mt19937 rng(seed() + 1);
    for (int64_t step = 1; step <= 12; ++step) {
      // Rows read this step (some twice), their gradients, the same in both copies.
      std::vector<int32_t> ids;
      for (int k = 0; k < 9; ++k) ids.push_back(int32_t(rng() % (step % 4 == 0 ? 20 : rows)));
      ids.push_back(ids[0]);
      const Tensor device_ids = Tensor::from_vector<int32_t>(ids, {int64_t(ids.size())}).to(Device::cuda());
      table.catch_up(device_ids, step - 1);
      const Tensor row_grad = testing::random_normal({int64_t(ids.size()), width}, DType::BF16, Device::cpu(), rng);
      Tensor grad = Tensor::zeros({rows, width}, DType::BF16, Device::cpu());
      for (size_t k = 0; k < ids.size(); ++k)
        std::memcpy(static_cast<uint16_t*>(grad.raw_data()) + ids[k] * width,
                    static_cast<const uint16_t*>(row_grad.raw_data()) + int64_t(k) * width, size_t(width) * 2);
      eager[1].grad.copy_from(grad);
      lazy[1].grad.copy_from(grad);
      for (size_t i : {size_t(0), size_t(2)}) {
        const Tensor other = testing::random_normal(eager[i].grad.shape(), DType::BF16, Device::cpu(), rng);
        eager[i].grad.copy_from(other);
        lazy[i].grad.copy_from(other);
      }
      scale.copy_from(Tensor::from_vector<float>({step % 3 == 0 ? 1.0f : 0.37f * float(step)}, {1}));
      // The clip norm reading the table's marked rows only: the dense sum's bits.
      {
        std::vector<Tensor> grads;
        for (const ops::cuda::AdamWSlot& slot : lazy) grads.push_back(slot.grad);
        const Tensor dense = Tensor::empty({1}, DType::F32, Device::cuda()), sparse = Tensor::empty({1}, DType::F32, Device::cuda());
        ops::cuda::grad_norm_squared(grads, dense);
        const ops::cuda::MarkedRows marked{1, table.marked_rows()};
        ops::cuda::grad_norm_squared(grads, sparse, &marked);
        expect_same_bits(sparse.to(Device::cpu()), dense.to(Device::cpu()), "clip norm at step " + std::to_string(step));
      }
      const ops::cuda::AdamWHyper hyper{1e-3 * double(step), 0.9, 0.95, 1e-8, 0.05, step};
      const Tensor eager_norm = Tensor::empty({1}, DType::F32, Device::cuda());
      const Tensor lazy_norm = Tensor::empty({1}, DType::F32, Device::cuda());
      ops::cuda::adamw_step(eager, hyper, precision, scale, 99, false, eager_norm);
      ops::cuda::adamw_step(lazy, hyper, precision, scale, 99, false, lazy_norm, &table);
      expect_same_bits(lazy_norm.to(Device::cpu()), eager_norm.to(Device::cpu()), "norm at step " + std::to_string(step));
      // The eager table's gradient stays; the lazy step zeroed the rows it updated.
      expect_same_bits(lazy[1].grad.to(Device::cpu()), Tensor::zeros({rows, width}, DType::BF16, Device::cpu()),
                       "the lazy table's gradient after step " + std::to_string(step));
      if (step % 5 == 0 || step == 12) {
        table.flush(step);
        for (size_t i = 0; i < 3; ++i) {
          const std::string what = "slot " + std::to_string(i) + " after step " + std::to_string(step);
          expect_same_bits(lazy[i].param.to(Device::cpu()), eager[i].param.to(Device::cpu()), what + " param");
          expect_same_bits(lazy[i].exp_avg.to(Device::cpu()), eager[i].exp_avg.to(Device::cpu()), what + " m");
          expect_same_bits(lazy[i].exp_avg_sq.to(Device::cpu()), eager[i].exp_avg_sq.to(Device::cpu()), what + " v");
          if (master)
            expect_same_bits(lazy[i].master.to(Device::cpu()), eager[i].master.to(Device::cpu()), what + " master");
        }
      }
    }
  }
}

// The optimizer's share of the embedding on the Moonlight benchmark (vocabulary 163840 x 2048, 8192 uniformly
// random tokens a step, clipping on): the eager step (norm over the whole gradient, AdamW over the whole table,
// zeroing the whole gradient) against the lazy one (bringing the batch's rows up to date before the lookup, the
// norm over the marked rows, the step on them, which zeroes their gradient).
TEST_F(LazyEmbeddingGpu, DISABLED_TimesMoonlightEmbedding) {
  const int64_t rows = 163840, width = 2048, tokens = 8192;
  for (const auto precision : {ops::cuda::OptimizerPrecision::PureBf16, ops::cuda::OptimizerPrecision::Fp32Master}) {
    const bool master = precision == ops::cuda::OptimizerPrecision::Fp32Master;
    const DType moment = master ? DType::F32 : DType::BF16;
    ops::cuda::AdamWSlot slot;
    slot.param = testing::random_normal({rows, width}, DType::BF16, Device::cuda(), rng(), 0.02f);
    slot.grad = Tensor::zeros({rows, width}, DType::BF16, Device::cuda());
    slot.exp_avg = Tensor::zeros({rows, width}, moment, Device::cuda());
    slot.exp_avg_sq = Tensor::zeros({rows, width}, moment, Device::cuda());
    if (master) slot.master = ops::cast(slot.param, DType::F32);
    const std::vector<ops::cuda::AdamWSlot> slots = {slot};
    const Tensor norm = Tensor::zeros({1}, DType::F32, Device::cuda()), scale = Tensor::zeros({1}, DType::F32, Device::cuda());
    int64_t step = 0;
    const auto hyper = [&] { return ops::cuda::AdamWHyper{1e-5, 0.9, 0.999, 1e-8, 0.0, step}; };
    const double eager_ms = testing::mean_gpu_ms([&] {
      ++step;
      ops::cuda::grad_norm_squared({slot.grad}, norm);
      ops::cuda::clip_coefficient(norm, 1.0, scale);
      ops::cuda::adamw_step(slots, hyper(), precision, scale, 7);
      zero_bytes(slot.grad.raw_data(), Device::cuda(), slot.grad.nbytes());
    });
    std::vector<Tensor> batches;
    for (int k = 0; k < 8; ++k) {
      std::vector<int32_t> ids(static_cast<size_t>(tokens));
      for (int32_t& id : ids) id = int32_t(rng()() % uint32_t(rows));
      batches.push_back(Tensor::from_vector<int32_t>(ids, {tokens}).to(Device::cuda()));
    }
    const int64_t lazy_start = step;
    ops::cuda::AdamWLazyRows table(slot, 0, precision, 7, step);
    const ops::cuda::MarkedRows marked{0, table.marked_rows()};
    const double lazy_ms = testing::mean_gpu_ms([&] {
      table.catch_up(batches[size_t(step % 8)], step);
      ++step;
      ops::cuda::grad_norm_squared({slot.grad}, norm, &marked);
      ops::cuda::clip_coefficient(norm, 1.0, scale);
      ops::cuda::adamw_step(slots, hyper(), precision, scale, 7, false, {}, &table);
    });
    const double catch_up_ms = testing::mean_gpu_ms([&] { table.catch_up(batches[size_t(step % 8)], step); });
    const double flush_ms = testing::mean_gpu_ms([&] { table.flush(step); }, 0, 1);
    std::printf("%s, [%lld, %lld], %lld random tokens: eager %.3f ms, lazy %.3f ms a step (its catch-up alone when "
                "already marked: %.3f ms); a flush of rows %lld steps behind: %.3f ms\n",
                master ? "fp32_master" : "pure_bf16", static_cast<long long>(rows), static_cast<long long>(width),
                static_cast<long long>(tokens), eager_ms, lazy_ms, catch_up_ms, static_cast<long long>(step - lazy_start),
                flush_ms);
  }
}

}  // namespace
}  // namespace moetune
