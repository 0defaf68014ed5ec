// The optimizer step's memory traffic on the GPU (issues 11 and 14): the ways the AdamW and gradient-norm kernels
// can reach memory give the same bits, and, not a check, the step's pieces (norm, clip, AdamW, zeroing) timed
// over the reference job's real parameter list, laid out as the engine lays it out, beside one tensor of the same
// size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include <cuda_runtime.h>

#include "gpu_test_util.h"
#include "test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/flat_buffers.h"
#include "moetune/model/model_description.h"
#include "moetune/model/placed_buffers.h"
#include "moetune/ops/adamw_math.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/grad_norm.h"

namespace moetune {
namespace {

using ops::cuda::AdamWAccess;
using ops::cuda::AdamWHyper;
using ops::cuda::AdamWSlot;
using ops::cuda::OptimizerPrecision;

const Device kGpu = Device::cuda();

AdamWHyper hyper_at(int64_t step) {
  return {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = step};
}

// Restores the process-wide access settings when a test ends, whatever it set.
class AccessSettings {
 public:
  AccessSettings() : adamw_(ops::cuda::adamw_access()) {}
  ~AccessSettings() { ops::cuda::set_adamw_access(adamw_); }

 private:
  AdamWAccess adamw_;
};

class OptimizerAccessGpu : public testing::GpuTest {};

std::string describe(const AdamWAccess& access) {
  std::string text = access.stages >= 2 ? "staged kernel, " + std::to_string(access.stages) + " stages" : "register kernel";
  if (access.stages < 2 && access.f32_master_stages >= 2)
    text += " (fp32 master: staged, " + std::to_string(access.f32_master_stages) + " stages)";
  text += ", min blocks " + std::to_string(access.min_blocks_per_sm);
  text += access.hardware_rounding ? ", hardware rounding" : ", software rounding";
  text += access.skip_untouched ? ", skip" : ", no skip";
  if (access.evict_first) text += ", evict first";
  return text;
}

// Every way the kernels can run, for the bit-identity tests: the register kernel with and without its register
// cap, the staged one at a few depths with and without its own, in each rounding/skip mode.
std::vector<AdamWAccess> access_variants() {
  std::vector<AdamWAccess> variants;
  for (int mode = 0; mode < 3; ++mode) {
    const bool hardware = mode == 2, skip = mode > 0;
    for (int min_blocks : {0, 6})
      variants.push_back({.min_blocks_per_sm = min_blocks, .hardware_rounding = hardware, .skip_untouched = skip,
                          .f32_master_stages = 0});
    for (int stages : {2, 3})
      for (int min_blocks : {0, 3})
        variants.push_back({.min_blocks_per_sm = min_blocks, .hardware_rounding = hardware, .skip_untouched = skip, .stages = stages});
  }
  variants.push_back({.stages = 4, .evict_first = true});
  variants.push_back({.stages = ops::cuda::kAdamWMaxStages});
  return variants;
}

// A slot of `shape` whose views start `offset` elements into their buffers (1: not 16-byte aligned, the scalar
// path), holding `initial` as the precision keeps the parameter (the fp32 master copy, or the bf16 parameter) and
// zero moments and gradient.
AdamWSlot start_slot(const Tensor& initial, const Shape& shape, bool master, int64_t offset) {
  const auto place = [&](DType dtype) {
    return Tensor::zeros({shape_numel(shape) + 1}, dtype, kGpu).flat_slice(offset, shape);
  };
  const DType moment = master ? DType::F32 : DType::BF16;
  AdamWSlot slot{.param = place(DType::BF16), .grad = place(DType::BF16), .exp_avg = place(moment),
                 .exp_avg_sq = place(moment)};
  if (master) {
    slot.master = place(DType::F32);
    slot.master.copy_from(initial);
  } else {
    slot.param.copy_from(ops::cast(initial, DType::BF16));
  }
  return slot;
}

// Every state tensor of the slots (parameter, moments, master copy), on the host, slot by slot.
void append_host_state(const std::vector<AdamWSlot>& slots, std::vector<Tensor>& state) {
  for (const AdamWSlot& slot : slots)
    for (const Tensor& t : {slot.param, slot.exp_avg, slot.exp_avg_sq, slot.master})
      if (t.defined()) state.push_back(t.to(Device::cpu()));
}

// Shapes around the chunk (8192) and vector (8) widths, some misaligned by one element, and a tensor whose first
// half never has a gradient (an embedding's unused rows), so that every path of every access variant runs: the
// same state after three steps, bit for bit, in every precision.
TEST_F(OptimizerAccessGpu, EveryAccessVariantGivesTheSameBits) {
  const AccessSettings restore;
  const std::vector<Shape> shapes = {{1}, {7}, {1000003}, {8192}, {8193}, {3, 257}, {64, 129}, {40000}};
  const std::vector<bool> misaligned = {false, true, false, false, true, false, false, true};
  for (OptimizerPrecision precision :
       {OptimizerPrecision::Fp32Master, OptimizerPrecision::PureBf16, OptimizerPrecision::Bf16Stochastic}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const bool master = precision == OptimizerPrecision::Fp32Master;
    // The start state and the gradients of every step, made once and copied into each variant's slots.
    std::vector<Tensor> initial, gradients;
    for (const Shape& shape : shapes) {
      initial.push_back(testing::random_normal(shape, DType::F32, Device::cpu(), rng()));
      for (int step = 0; step < 3; ++step)
        gradients.push_back(testing::random_normal(shape, DType::BF16, Device::cpu(), rng(), 1e-2f));
    }
    for (int step = 0; step < 3; ++step) {  // slot 2's first half: no gradient
      Tensor g = testing::random_normal(shapes[2], DType::F32, Device::cpu(), rng(), 1e-2f);
      std::fill(g.data<float>(), g.data<float>() + g.numel() / 2, 0.0f);
      gradients[3 * 2 + size_t(step)] = ops::cast(g, DType::BF16);
    }
    const auto run = [&](AdamWAccess access) {
      ops::cuda::set_adamw_access(access);
      std::vector<AdamWSlot> slots;
      for (size_t i = 0; i < shapes.size(); ++i) slots.push_back(start_slot(initial[i], shapes[i], master, misaligned[i] ? 1 : 0));
      const Tensor scale = Tensor::from_vector<float>({0.37f}, {1}).to(kGpu);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < shapes.size(); ++i) slots[i].grad.copy_from(gradients[3 * i + size_t(step)]);
        ops::cuda::adamw_step(slots, hyper_at(step + 1), precision, scale, 1234);
      }
      std::vector<Tensor> state;
      append_host_state(slots, state);
      return state;
    };
    const std::vector<Tensor> reference = run({.min_blocks_per_sm = 0, .hardware_rounding = false, .skip_untouched = false});
    for (const AdamWAccess& access : access_variants()) {
      SCOPED_TRACE(::testing::Message() << describe(access));
      const std::vector<Tensor> state = run(access);
      ASSERT_EQ(state.size(), reference.size());
      for (size_t i = 0; i < state.size(); ++i) EXPECT_TRUE(state[i].same_bytes(reference[i])) << "tensor " << i;
    }
  }
}

// The staged kernel over many tensors (several tables, several chunks a block, so that its ring of stages wraps
// and its producer crosses tensors; some views not 16-byte aligned) with the norm folded into the step: the
// register kernel's state and norm, bit for bit (the norm's final sum is of fixed order, so equal bits say the
// per-warp partials were equal too), in every precision.
TEST_F(OptimizerAccessGpu, StagedKernelGivesTheRegisterKernelsStateAndNorm) {
  const AccessSettings restore;
  std::uniform_int_distribution<int64_t> size(1, 40000);
  std::vector<Shape> shapes = {{3000017}, {8192}, {8193}, {2048}, {2056}};
  for (int i = 0; i < 500; ++i) shapes.push_back({size(rng())});
  for (OptimizerPrecision precision :
       {OptimizerPrecision::Fp32Master, OptimizerPrecision::PureBf16, OptimizerPrecision::Bf16Stochastic}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const bool master = precision == OptimizerPrecision::Fp32Master;
    std::vector<Tensor> initial, gradients;
    for (const Shape& shape : shapes) {
      initial.push_back(testing::random_normal(shape, DType::F32, Device::cpu(), rng()));
      gradients.push_back(testing::random_normal(shape, DType::BF16, Device::cpu(), rng(), 1e-2f));
    }
    const auto run = [&](AdamWAccess access) {
      ops::cuda::set_adamw_access(access);
      std::vector<AdamWSlot> slots;
      for (size_t i = 0; i < shapes.size(); ++i) {
        slots.push_back(start_slot(initial[i], shapes[i], master, i % 53 == 7 ? 1 : 0));
        slots.back().grad.copy_from(gradients[i]);
      }
      const Tensor scale = Tensor::from_vector<float>({0.37f}, {1}).to(kGpu);
      std::vector<Tensor> state;
      for (int step = 1; step <= 2; ++step) {
        const Tensor norm_squared = Tensor::zeros({1}, DType::F32, kGpu);
        ops::cuda::adamw_step(slots, hyper_at(step), precision, scale, 99, false, norm_squared);
        state.push_back(norm_squared.to(Device::cpu()));
      }
      append_host_state(slots, state);
      return state;
    };
    const std::vector<Tensor> reference = run({.f32_master_stages = 0});  // the register kernel in every precision
    for (int stages : {2, 4, 6, ops::cuda::kAdamWMaxStages})
      for (int min_blocks : {0, 3}) {
        const AdamWAccess access{.min_blocks_per_sm = min_blocks, .stages = stages};
        SCOPED_TRACE(::testing::Message() << describe(access));
        const std::vector<Tensor> state = run(access);
        ASSERT_EQ(state.size(), reference.size());
        EXPECT_TRUE(state[0].same_bytes(reference[0])) << "the norm of step 1";
        EXPECT_TRUE(state[1].same_bytes(reference[1])) << "the norm of step 2";
        for (size_t i = 2; i < state.size(); ++i) EXPECT_TRUE(state[i].same_bytes(reference[i])) << "tensor " << i;
      }
  }
}

// The norm folded into the step: Σ g² of the unscaled gradients equal to grad_norm_squared's up to the order of
// the sum, the same bits on a second run, and the state the same bits as a step without it; with bf16 and 8-bit
// moments, over more tensors than one launch's table holds and some misaligned ones.
TEST_F(OptimizerAccessGpu, NormFoldedIntoTheStepMatchesTheNormPass) {
  std::uniform_int_distribution<int64_t> size(1, 20000);
  for (bool int8_state : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "int8 state " << int8_state);
    std::vector<Shape> shapes = {{1000003}, {8192}, {8193}};
    for (int i = 0; i < 700; ++i) shapes.push_back({size(rng())});
    const auto make_slots = [&] {
      std::vector<AdamWSlot> slots;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const bool odd = i % 97 == 5;
        const int64_t n = shape_numel(shapes[i]);
        const auto view = [&](DType dtype, int64_t numel) {
          return Tensor::zeros({numel + 1}, dtype, kGpu).flat_slice(odd ? 1 : 0, {numel});
        };
        AdamWSlot slot{.param = view(DType::BF16, n), .grad = view(DType::BF16, n),
                       .exp_avg = view(int8_state ? DType::U8 : DType::BF16, n),
                       .exp_avg_sq = view(int8_state ? DType::U8 : DType::BF16, n)};
        if (int8_state) {
          slot.exp_avg_absmax = view(DType::F32, ops::adamw_state_blocks(n));
          slot.exp_avg_sq_absmax = view(DType::F32, ops::adamw_state_blocks(n));
        }
        slots.push_back(slot);
      }
      return slots;
    };
    std::vector<AdamWSlot> a = make_slots(), b = make_slots();
    std::vector<Tensor> grads;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor g = testing::random_normal(shapes[i], DType::BF16, Device::cpu(), rng(), 1e-2f);
      a[i].grad.copy_from(g);
      b[i].grad.copy_from(g);
      grads.push_back(a[i].grad);
    }
    const Tensor pass = Tensor::zeros({1}, DType::F32, kGpu), folded = Tensor::zeros({1}, DType::F32, kGpu),
                 again = Tensor::zeros({1}, DType::F32, kGpu);
    ops::cuda::grad_norm_squared(grads, pass);
    const Tensor scale = Tensor::from_vector<float>({0.5f}, {1}).to(kGpu);
    ops::cuda::adamw_step(a, hyper_at(1), OptimizerPrecision::PureBf16, scale, 3, int8_state, folded);
    ops::cuda::adamw_step(b, hyper_at(1), OptimizerPrecision::PureBf16, scale, 3, int8_state);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_TRUE(a[i].param.to(Device::cpu()).same_bytes(b[i].param.to(Device::cpu()))) << "slot " << i;
      EXPECT_TRUE(a[i].exp_avg_sq.to(Device::cpu()).same_bytes(b[i].exp_avg_sq.to(Device::cpu()))) << "slot " << i;
    }
    // The same gradients again (the state moved on; the norm depends on the gradients alone).
    ops::cuda::adamw_step(a, hyper_at(2), OptimizerPrecision::PureBf16, Tensor(), 3, int8_state, again);
    const float expected = testing::to_cpu_f32(pass).data<float>()[0];
    EXPECT_NEAR(testing::to_cpu_f32(folded).data<float>()[0], expected, 1e-5 * expected);
    EXPECT_TRUE(again.to(Device::cpu()).same_bytes(folded.to(Device::cpu())));
  }
}

// The reference job's parameters (Qwen3-30B-A3B cut to 4 layers), from the engine's own layout code.
model::ParameterLayout reference_job_layout() {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(testing::fixture("qwen3_moe_tiny") / "config.json"));
  config["vocab_size"] = 151936;
  config["hidden_size"] = 2048;
  config["intermediate_size"] = 6144;
  config["num_attention_heads"] = 32;
  config["num_key_value_heads"] = 4;
  config["head_dim"] = 128;
  config["num_local_experts"] = 128;
  config["num_experts_per_tok"] = 8;
  config["moe_intermediate_size"] = 768;
  config["num_hidden_layers"] = 4;
  config["mlp_only_layers"] = nlohmann::json::array();
  config["max_position_embeddings"] = 40960;
  const testing::ScratchDir folder;
  testing::write_file(folder / "config.json", config.dump());
  return model::parameter_layout(model::load_model_spec(folder / "config.json"));
}

// The benchmark's Moonlight (Moonlight-16B-A3B's widths cut to 4 layers, the first dense: bench/
// make_reference_model.py's), from the engine's own layout code.
model::ParameterLayout moonlight_layout() {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(testing::fixture("deepseek_v3_tiny") / "config.json"));
  config["vocab_size"] = 163840;
  config["hidden_size"] = 2048;
  config["intermediate_size"] = 11264;
  config["moe_intermediate_size"] = 1408;
  config["num_attention_heads"] = 16;
  config["num_key_value_heads"] = 16;
  config["n_routed_experts"] = 64;
  config["n_shared_experts"] = 2;
  config["num_experts_per_tok"] = 6;
  config["n_group"] = 1;
  config["topk_group"] = 1;
  config["q_lora_rank"] = nullptr;
  config["kv_lora_rank"] = 512;
  config["qk_nope_head_dim"] = 128;
  config["qk_rope_head_dim"] = 64;
  config["qk_head_dim"] = 192;
  config["v_head_dim"] = 128;
  config["head_dim"] = 64;
  config["num_hidden_layers"] = 4;
  config["first_k_dense_replace"] = 1;
  config["max_position_embeddings"] = 8192;
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000.0}};
  const testing::ScratchDir folder;
  testing::write_file(folder / "config.json", config.dump());
  return model::parameter_layout(model::load_model_spec(folder / "config.json"));
}

// Times `work` on the GPU's stream with events: the median of `repeats` runs after one warm-up.
double median_ms(const std::function<void()>& work, int repeats = 7) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  work();
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start, gpu::stream());
    work();
    cudaEventRecord(stop, gpu::stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return double(times[times.size() / 2]);
}

// Fills a bf16 buffer with normal values (scale 1e-3) by repeating one host draw.
void fill_normal(const Tensor& buffer, std::mt19937& rng) {
  const int64_t piece = std::min<int64_t>(buffer.numel(), int64_t(1) << 24);
  const Tensor host = testing::random_normal({piece}, DType::BF16, Device::cpu(), rng, 1e-3f);
  for (int64_t at = 0; at < buffer.numel(); at += piece) {
    const int64_t n = std::min(piece, buffer.numel() - at);
    buffer.flat_slice(at, {n}).copy_from(n == piece ? host : host.flat_slice(0, {n}));
  }
}

// Not a check: the step's pieces over the reference job's 3.1 B parameters in pure bf16, as the engine holds
// them (parameters and gradients in flat runs by placement, moments in one flat run each; 16-byte aligned
// views), beside one tensor of the same size and the 128M-element tensor of AdamWInt8Gpu.SpeedBesideBf16Moments,
// for each way the kernels can reach memory. Run with --gtest_also_run_disabled_tests.
TEST_F(OptimizerAccessGpu, DISABLED_TimesReferenceJobSlots) {
  const AccessSettings restore;
  const model::ParameterLayout layout = reference_job_layout();
  std::vector<FlatRequest> requests, moments;
  int64_t total = 0;
  for (const model::ParameterSpec& p : layout.parameters) {
    requests.push_back({p.shape, DType::BF16});
    moments.push_back({p.shape, DType::BF16});
    total += shape_numel(p.shape);
  }
  const model::PlacedBuffers params = model::allocate_by_placement(layout, requests, kGpu, true, {});
  const model::PlacedBuffers grads = model::allocate_by_placement(layout, requests, kGpu, true, {});
  const FlatBuffers exp_avg = allocate_flat(moments, kGpu, true), exp_avg_sq = allocate_flat(moments, kGpu, true);
  for (const FlatBuffers* runs : {&params.replicated, &params.experts, &grads.replicated, &grads.experts})
    for (const Tensor& buffer : runs->buffers) fill_normal(buffer, rng());
  std::vector<AdamWSlot> slots;
  std::vector<Tensor> gradients;
  for (size_t i = 0; i < layout.parameters.size(); ++i) {
    slots.push_back({.param = params.views[i], .grad = grads.views[i], .exp_avg = exp_avg.views[i],
                     .exp_avg_sq = exp_avg_sq.views[i]});
    gradients.push_back(grads.views[i]);
  }
  std::printf("reference job: %zu slots, %lld parameters (%.2f GB of bf16 gradients)\n", slots.size(),
              static_cast<long long>(total), 2.0 * double(total) / 1e9);

  const Tensor norm_squared = Tensor::zeros({1}, DType::F32, kGpu), coefficient = Tensor::zeros({1}, DType::F32, kGpu);
  int64_t step = 0;
  const auto adamw_rate = [&](double ms, int64_t n) { return 14.0 * double(n) / ms / 1e6; };
  const auto time_adamw = [&](const std::vector<AdamWSlot>& s, const Tensor& scale) {
    return median_ms([&] { ops::cuda::adamw_step(s, hyper_at(++step), OptimizerPrecision::PureBf16, scale, 7); });
  };
  const double norm_ms = median_ms([&] { ops::cuda::grad_norm_squared(gradients, norm_squared); });
  std::printf("  norm: %.3f ms (%.0f GB/s at 2 B)\n", norm_ms, 2.0 * double(total) / norm_ms / 1e6);
  std::printf("  clip coefficient: %.3f ms\n",
              median_ms([&] { ops::cuda::clip_coefficient(norm_squared, 1.0, coefficient); }));
  const double zero_ms = median_ms([&] {
    grads.replicated.zero();
    grads.experts.zero();
  });
  std::printf("  zeroing the gradient runs: %.3f ms (%.0f GB/s at 2 B)\n", zero_ms, 2.0 * double(total) / zero_ms / 1e6);
  for (const FlatBuffers* runs : {&grads.replicated, &grads.experts})
    for (const Tensor& buffer : runs->buffers) fill_normal(buffer, rng());

  const std::vector<AdamWAccess> accesses = {{0, false, false}, {0, false, true}, {0, true, true}, {6, true, true}};
  const auto time_accesses = [&](const char* what, const std::vector<AdamWSlot>& s, int64_t n) {
    for (const AdamWAccess& access : accesses) {
      ops::cuda::set_adamw_access(access);
      const double ms = time_adamw(s, coefficient);
      std::printf("  AdamW %s, min blocks %d, %s rounding, %s: %.3f ms (%.0f GB/s at 14 B)\n", what,
                  access.min_blocks_per_sm, access.hardware_rounding ? "hardware" : "software",
                  access.skip_untouched ? "skip" : "no skip", ms, adamw_rate(ms, n));
    }
  };
  time_accesses("dense gradients", slots, total);
  // As in a step of 8192 tokens: the embedding's gradient is zero but for (at most) 8192 rows, and the other
  // rows' moments stay zero from the first step on.
  for (const FlatBuffers* moment : {&exp_avg, &exp_avg_sq}) moment->zero();
  for (size_t i = 0; i < layout.parameters.size(); ++i)
    if (layout.parameters[i].role == model::ParameterRole::Embedding) {
      const Tensor& g = grads.views[i];
      const int64_t row = g.shape()[1], kept = 8192 * row;
      zero_bytes(static_cast<uint16_t*>(g.raw_data()) + kept, kGpu, size_t(g.numel() - kept) * 2);
    }
  time_accesses("with the embedding's unused rows", slots, total);

  // One tensor of the same size, then the 128M-element one, each in fresh buffers.
  for (int64_t n : {total, int64_t(1) << 27}) {
    std::vector<AdamWSlot> one = {{.param = Tensor::zeros({n}, DType::BF16, kGpu), .grad = Tensor::zeros({n}, DType::BF16, kGpu),
                                   .exp_avg = Tensor::zeros({n}, DType::BF16, kGpu),
                                   .exp_avg_sq = Tensor::zeros({n}, DType::BF16, kGpu)}};
    fill_normal(one[0].grad, rng());
    fill_normal(one[0].param, rng());
    time_accesses(n == total ? "one tensor of the same size" : "one tensor of 128M", one, n);
  }
}

// Not a check: AdamW over the benchmark's Moonlight parameters as the engine holds them (parameters and gradients in
// flat runs by placement, the state in one flat run each), in every precision, for the register kernel and the
// staged one at several depths, beside a device-to-device copy moving as many bytes (its rate counts the bytes
// read and written, as the AdamW rates do). Run with --gtest_also_run_disabled_tests.
TEST_F(OptimizerAccessGpu, DISABLED_TimesMoonlightSlots) {
  const AccessSettings restore;
  const model::ParameterLayout layout = moonlight_layout();
  std::vector<FlatRequest> requests, bf16_state, f32_state;
  int64_t total = 0;
  for (const model::ParameterSpec& p : layout.parameters) {
    requests.push_back({p.shape, DType::BF16});
    bf16_state.push_back({p.shape, DType::BF16});
    f32_state.push_back({p.shape, DType::F32});
    total += shape_numel(p.shape);
  }
  std::printf("moonlight: %zu slots, %lld parameters\n", layout.parameters.size(), static_cast<long long>(total));
  {
    // A copy of 7 B an element: 14 B of traffic an element, the bf16 modes' bytes.
    const Tensor source = Tensor::zeros({total * 7 / 2}, DType::F32, kGpu), target = Tensor::zeros({total * 7 / 2}, DType::F32, kGpu);
    const size_t bytes = size_t(source.numel()) * 4;
    const double ms = median_ms([&] {
      cudaMemcpyAsync(target.raw_data(), source.raw_data(), bytes, cudaMemcpyDeviceToDevice, gpu::stream());
    });
    std::printf("  device-to-device copy of %.2f GB: %.3f ms (%.0f GB/s read + written)\n", double(bytes) / 1e9, ms,
                2.0 * double(bytes) / ms / 1e6);
  }
  const model::PlacedBuffers params = model::allocate_by_placement(layout, requests, kGpu, true, {});
  const model::PlacedBuffers grads = model::allocate_by_placement(layout, requests, kGpu, true, {});
  for (const FlatBuffers* runs : {&params.replicated, &params.experts, &grads.replicated, &grads.experts})
    for (const Tensor& buffer : runs->buffers) fill_normal(buffer, rng());
  const Tensor coefficient = Tensor::from_vector<float>({0.5f}, {1}).to(kGpu);
  const Tensor norm_squared = Tensor::zeros({1}, DType::F32, kGpu);
  {
    std::vector<Tensor> gradients(grads.views.begin(), grads.views.end());
    const double ms = median_ms([&] { ops::cuda::grad_norm_squared(gradients, norm_squared); });
    std::printf("  the clipping norm's pass: %.3f ms (%.0f GB/s at 2 B, read only)\n", ms, 2.0 * double(total) / ms / 1e6);
  }

  std::vector<AdamWAccess> accesses = {{}, {.f32_master_stages = 0}};
  for (int stages : {2, 3, 4, 6}) accesses.push_back({.stages = stages});
  accesses.push_back({.min_blocks_per_sm = 3, .stages = 3});
  accesses.push_back({.min_blocks_per_sm = 3, .stages = 4});
  accesses.push_back({.stages = 4, .evict_first = true});
  int64_t step = 0;
  const auto time_precision = [&](OptimizerPrecision precision, const FlatBuffers& exp_avg,
                                  const FlatBuffers& exp_avg_sq, const FlatBuffers* master, bool fold_norm) {
    std::vector<AdamWSlot> slots;
    for (size_t i = 0; i < layout.parameters.size(); ++i) {
      slots.push_back({.param = params.views[i], .grad = grads.views[i], .exp_avg = exp_avg.views[i],
                       .exp_avg_sq = exp_avg_sq.views[i]});
      if (master) slots.back().master = master->views[i];
    }
    const double bytes = (master ? 28.0 : 14.0) * double(total);
    for (const AdamWAccess& access : accesses) {
      ops::cuda::set_adamw_access(access);
      const double ms = median_ms([&] {
        ops::cuda::adamw_step(slots, hyper_at(++step), precision, coefficient, 7, false,
                              fold_norm ? norm_squared : Tensor());
      });
      std::printf("  AdamW %s%s, %s: %.3f ms (%.0f GB/s)\n",
                  precision == OptimizerPrecision::Fp32Master ? "fp32_master"
                  : precision == OptimizerPrecision::PureBf16 ? "pure_bf16"
                                                              : "bf16_stochastic",
                  fold_norm ? " with the norm folded" : "", describe(access).c_str(), ms, bytes / ms / 1e6);
    }
  };
  {
    const FlatBuffers exp_avg = allocate_flat(bf16_state, kGpu, true), exp_avg_sq = allocate_flat(bf16_state, kGpu, true);
    time_precision(OptimizerPrecision::PureBf16, exp_avg, exp_avg_sq, nullptr, false);
    time_precision(OptimizerPrecision::Bf16Stochastic, exp_avg, exp_avg_sq, nullptr, false);
    time_precision(OptimizerPrecision::PureBf16, exp_avg, exp_avg_sq, nullptr, true);
  }
  const FlatBuffers exp_avg = allocate_flat(f32_state, kGpu, true), exp_avg_sq = allocate_flat(f32_state, kGpu, true),
                    master = allocate_flat(f32_state, kGpu, true);
  time_precision(OptimizerPrecision::Fp32Master, exp_avg, exp_avg_sq, &master, false);
}

}  // namespace
}  // namespace moetune
