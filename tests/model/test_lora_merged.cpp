// LoRA on the CPU engine against its own merged weights, for every adapter a config puts on a model: the adapted
// model gives the logits and loss of its weights merged in (merge_lora: W + scale·B·A, what PEFT's
// merge_and_unload gives), and each adapter's gradients are that merged model's weight gradient G (the rows of
// the adapter's piece of a fused weight) through LoRA's chain rule: dB = scale·G·Aᵀ, dA = scale·Bᵀ·G. The same
// algebra a PEFT fixture checks, for blocks that have none: DeepSeek-V3's latent attention (whose adapters the
// block ignored before session 25: made, saved, never trained), Qwen2-MoE's shared-expert gate (likewise) and
// GPT-OSS's experts (biases, clamped SwiGLU; per expert e, dB_e = scale·G_e·A_eᵀ, dA_e = scale·B_eᵀ·G_e).
// Relative error ≤ 1e-5 (fp32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "moetune/model/causal_lm.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_weights.h"
#include "moetune/ops/lora.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using testing::relative_error_f32;

constexpr double kTolerance = 1e-5;

// The fixture in fp32 with rank-2 adapters on `targets`, every B drawn from a fixed seed (PEFT starts B at zero,
// which would make any adapter look right).
ModelWeights adapted(const std::string& fixture, const std::vector<std::string>& targets,
                     const std::vector<std::string>& parameters = {}) {
  ModelWeights weights = load_checkpoint(testing::fixture(fixture), LoadOptions{DType::F32});
  attach_lora(weights,
              LoraConfig{.rank = 2, .alpha = 4, .target_modules = targets, .target_parameters = parameters, .seed = 5});
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i)
    if (weights.layout.parameters[i].name.find(".lora_B.") != std::string::npos)
      for (int64_t k = 0; k < weights.parameters[i].numel(); ++k) weights.parameters[i].data<float>()[k] = normal(rng);
  return weights;
}

size_t index_of(const ModelWeights& weights, const std::string& name) {
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i)
    if (weights.layout.parameters[i].name == name) return i;
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

// scale·(left·right) with left [m, k] (or its transpose when `transpose_left`: stored [k, m]) and right [k, n]
// (or stored [n, k] when `transpose_right`), in double.
Tensor scaled_product(const Tensor& left, bool transpose_left, const Tensor& right, bool transpose_right,
                      double scale) {
  const int64_t m = transpose_left ? left.size(1) : left.size(0), k = transpose_left ? left.size(0) : left.size(1);
  const int64_t n = transpose_right ? right.size(0) : right.size(1);
  Tensor out = Tensor::empty({m, n}, DType::F32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float l = transpose_left ? left.data<float>()[p * m + i] : left.data<float>()[i * k + p];
        const float r = transpose_right ? right.data<float>()[j * k + p] : right.data<float>()[p * n + j];
        sum += double(l) * double(r);
      }
      out.data<float>()[i * n + j] = float(scale * sum);
    }
  return out;
}

// An adapter's gradients against the merged weight's gradient g [out, in] (its rows of the adapted piece): dB and dA.
void expect_chain_rule(const Tensor& da, const Tensor& db, const Tensor& a, const Tensor& b, const Tensor& g,
                       double scale) {
  double squares = 0;
  for (int64_t k = 0; k < db.numel(); ++k) squares += double(db.data<float>()[k]) * db.data<float>()[k];
  EXPECT_GT(squares, 0.0);  // the adapter is trained, not skipped
  EXPECT_LE(relative_error_f32(db, scaled_product(g, false, a, true, scale)), kTolerance);  // G·Aᵀ
  EXPECT_LE(relative_error_f32(da, scaled_product(b, true, g, false, scale)), kTolerance);  // Bᵀ·G
}

void expect_adapters_match_merged_weights(const std::string& fixture, const std::vector<std::string>& targets,
                                          int expected_adapters, const std::vector<std::string>& parameters = {}) {
  SCOPED_TRACE(fixture);
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 24; ++t) ids.push_back((t * 37 + 5) % 90 + 2);
  const Tensor tokens = Tensor::from_vector(ids, {2, 12});
  const Batch batch{.input_ids = tokens, .labels = tokens};

  ModelWeights merged_weights = adapted(fixture, targets, parameters);
  merge_lora(merged_weights);
  const testing::ScratchDir scratch;
  save_checkpoint(merged_weights, scratch.path());
  CausalLM merged = CausalLM::from_pretrained(scratch.path());  // every weight trainable: G for each
  const CausalLMOutput merged_out = merged.forward(batch);
  merged.backward();

  CausalLM model = CausalLM::from_weights(adapted(fixture, targets, parameters));
  const CausalLMOutput out = model.forward(batch);
  EXPECT_LE(relative_error_f32(out.logits, merged_out.logits), kTolerance);
  EXPECT_NEAR(out.loss, merged_out.loss, kTolerance * std::fabs(merged_out.loss));
  model.backward();

  const ModelWeights& w = model.weights();
  const double scale = w.lora->scale();
  int checked = 0;
  for (size_t a = 0; a < w.layout.parameters.size(); ++a) {
    const std::string& name = w.layout.parameters[a].name;
    const size_t at = name.find(".lora_A.");
    if (at == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string weight = name.substr(0, at);
    const size_t piece = std::stoul(name.substr(at + 8));
    const size_t b = index_of(w, lora_parameter_name(weight, "lora_B", piece));
    // The piece's rows of the merged weight's gradient (q, k and v of a fused qkv each have their own adapter).
    const size_t base = index_of(merged.weights(), weight);
    const ParameterSpec& spec = merged.weights().layout.parameters[base];
    const Tensor& da = model.parameters().grads()[a];
    const Tensor& db = model.parameters().grads()[b];
    ASSERT_TRUE(da.defined() && db.defined());
    if (spec.role == ParameterRole::Experts) {  // A [E·r, in] expert-major, B [out, r·E] packed as PEFT's
      const int64_t experts = spec.shape[0], r = w.parameters[a].size(0) / experts;
      for (int64_t e = 0; e < experts; ++e)
        expect_chain_rule(da.narrow(e * r, r), ops::expert_lora_b(db, e, experts), w.parameters[a].narrow(e * r, r),
                          ops::expert_lora_b(w.parameters[b], e, experts), merged.parameters().grads()[base][e], scale);
      ++checked;
      continue;
    }
    int64_t first_row = 0;
    for (size_t p = 0; p < piece; ++p) first_row += spec.pieces[p].shape[0];
    const Tensor& full = merged.parameters().grads()[base];
    ASSERT_TRUE(full.defined());
    const int64_t rows = w.parameters[b].size(0), columns = full.size(1);
    Tensor g = Tensor::empty({rows, columns}, DType::F32);
    std::copy_n(full.data<float>() + first_row * columns, rows * columns, g.data<float>());
    expect_chain_rule(da, db, w.parameters[a], w.parameters[b], g, scale);
    ++checked;
  }
  EXPECT_EQ(checked, expected_adapters);
}

// 3 layers × 5 projections with q_lora_rank; 2 layers × 4 on q_proj.
TEST(LoraMerged, LatentAttentionWithQLoraRank) {
  expect_adapters_match_merged_weights("deepseek_v3_tiny",
                                       {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}, 15);
}

TEST(LoraMerged, LatentAttentionOnQProj) {
  expect_adapters_match_merged_weights("deepseek_v3_qproj_tied",
                                       {"q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}, 8);
}

// GPT-OSS's experts (biases, clamped SwiGLU, gate / up interleaved on disk) with q / o: 2 layers × (2 + 2).
TEST(LoraMerged, GptOssExpertsAndAttention) {
  expect_adapters_match_merged_weights("gpt_oss_tiny", {"q_proj", "o_proj"}, 8,
                                       {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"});
}

// all-linear on Qwen2-MoE: q / k / v pieces of the fused qkv, o, the shared expert's gate / up / down and its
// sigmoid gate (shared_expert_gate, an nn.Linear that PEFT's all-linear takes).
TEST(LoraMerged, Qwen2MoeAllLinearWithTheSharedExpertGate) {
  ModelWeights probe = load_checkpoint(testing::fixture("qwen2_moe_tiny"), LoadOptions{DType::F32});
  attach_lora(probe, LoraConfig{.rank = 2, .alpha = 4, .target_modules = {"all-linear"}, .seed = 5});
  int adapters = 0, gates = 0;
  for (const ParameterSpec& spec : probe.layout.parameters)
    if (spec.name.find(".lora_A.") != std::string::npos) {
      ++adapters;
      gates += spec.name.find("shared_gate") != std::string::npos;
    }
  EXPECT_GT(gates, 0);
  expect_adapters_match_merged_weights("qwen2_moe_tiny", {"all-linear"}, adapters);
}

// The guard behind the bugs above: a model whose blocks leave an adapter unread refuses to build, naming it. A store
// no block has read names the first adapter; the CPU model built on the same weights reads every one.
TEST(LoraMerged, AnAdapterNoBlockRunsIsRefused) {
  const ParameterStore unread(adapted("deepseek_v3_tiny", {"kv_b_proj", "o_proj"}));
  try {
    unread.require_lora_adapters_looked_up();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.kv_b.lora_A"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kv_b_proj"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(CausalLM::from_weights(adapted("deepseek_v3_tiny", {"kv_b_proj", "o_proj"})));
}

}  // namespace
}  // namespace moetune::model
