// The GPU's latent attention block where attention reads v in kv_b's output (ops/mla_v_in_place.h: every width a
// multiple of 8, as Moonlight's and DeepSeek-V3's are; the transformers fixtures' narrow heads take the copying
// path). A DeepSeek-V3 with such heads (deepseek_v3_tiny's config, wider heads, random weights saved as bf16) runs
// one forward and backward pass on the GPU and on the CPU engine (the fixtures' parity tests hold the CPU engine to
// transformers): losses and the attention's gradients must agree within bf16's bounds, and the blocks' stashes must
// be what the memory plan declares for them (the model: gpu/random_model.h).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "gpu_test_util.h"
#include "moetune/model/causal_lm.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/model_description.h"
#include "moetune/model/parameter_layout.h"
#include "random_model.h"
#include "stash_plan_check.h"
#include "test_util.h"

namespace moetune {
namespace {

using testing::relative_error;
using testing::to_cpu_f32;

class MlaVInKvGpu : public testing::GpuTest {};

TEST_F(MlaVInKvGpu, MatchesTheCpuAndThePlan) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const testing::ScratchDir scratch;
  const std::filesystem::path folder = testing::write_wide_mla_model(scratch / "model", rng());
  auto gpu = model::cuda::CausalLM::from_pretrained(folder);
  auto cpu = model::CausalLM::from_pretrained(folder);
  const model::ModelSpec& spec = gpu.spec();
  bool in_kv = false;
  for (const model::LayerSpec& layer : spec.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers)
      if (sublayer.attention()) in_kv = model::gpu_mla_v_in_kv(*sublayer.attention());
  ASSERT_TRUE(in_kv) << "the model's heads must take the path under test";

  const int64_t rows = 2, seq = 24;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % spec.vocab_size);
  const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
  const model::CausalLMOutput on_gpu = gpu.forward_backward({.input_ids = input_ids, .labels = input_ids});
  const model::CausalLMOutput on_cpu = cpu.forward_backward({.input_ids = input_ids, .labels = input_ids});
  std::printf("loss: gpu %.6f cpu %.6f\n", on_gpu.loss, on_cpu.loss);
  EXPECT_NEAR(on_gpu.loss, on_cpu.loss, 1e-2 * on_cpu.loss);
  // The attention's projections, whose gradients pass through v and dv (bf16 activations against fp32).
  for (const char* name : {"kv_b", "o", "q_b", "q_a", "kv_a"})
    for (int64_t layer = 0; layer < int64_t(spec.layers.size()); ++layer) {
      const std::string parameter = "layers." + std::to_string(layer) + ".attn." + name;
      const model::Param g = gpu.parameters().find(parameter), c = cpu.parameters().find(parameter);
      ASSERT_EQ(g.defined(), c.defined()) << parameter;
      if (!g.defined()) continue;
      const double error = relative_error(g.grad, to_cpu_f32(c.grad));
      std::printf("%s: gradient relative error %.3g\n", parameter.c_str(), error);
      EXPECT_LT(error, 5e-2) << parameter;
    }

  // The stashes (a forward pass kept whole) against the plan's declaration for these heads.
  gpu.zero_grad();
  gpu.forward_backward({.input_ids = input_ids, .labels = input_ids});
  testing::expect_stashes_as_planned(gpu, rows * seq);
}

}  // namespace
}  // namespace moetune
