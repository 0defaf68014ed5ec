// training.recompute in the memory plan, and training.micro_batch_size: auto's choice from it, on the reference
// job's model (Qwen3-30B-A3B cut to 4 and to 12 layers, rows of 4096 tokens).
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/model_description.h"
#include "moetune/model/recompute.h"
#include "moetune/train/micro_batch_fit.h"

namespace moetune::model {
namespace {

ModelSpec qwen3_30b_a3b(int layers) {
  return describe_model(nlohmann::json::parse(fmt::format(R"({{
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": {},
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 768, "intermediate_size": 6144, "decoder_sparse_step": 1, "norm_topk_prob": true,
    "vocab_size": 151936, "tie_word_embeddings": false, "mlp_only_layers": []}})", layers)), "config.json");
}

TEST(RecomputePlan, ModesParseAndNameTheirSublayers) {
  EXPECT_EQ(parse_recompute("experts"), Recompute::Experts);
  EXPECT_STREQ(recompute_name(parse_recompute("full")), "full");
  try {
    parse_recompute("moe");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'training.recompute' is 'moe', not one of: none, experts, attention, full"),
              std::string::npos) << e.what();
  }
  const ModelSpec spec = qwen3_30b_a3b(1);
  const SublayerSpec& attention = spec.layers[0].sublayers[0];
  const SublayerSpec& moe = spec.layers[0].sublayers[1];
  EXPECT_TRUE(recomputes(Recompute::Experts, moe) && !recomputes(Recompute::Experts, attention));
  EXPECT_TRUE(recomputes(Recompute::Attention, attention) && !recomputes(Recompute::Attention, moe));
  EXPECT_TRUE(recomputes(Recompute::Full, attention) && recomputes(Recompute::Full, moe));
  EXPECT_FALSE(recomputes(Recompute::None, attention) || recomputes(Recompute::None, moe));
}

TEST(RecomputePlan, RecomputedSublayersKeepTheirInputAndPeakInTheirBackward) {
  const ModelSpec spec = qwen3_30b_a3b(4);
  const int64_t T = 8192, input = T * 2048 * 2;
  const ActivationPlan none = gpu_activation_plan(spec, T);
  const ActivationPlan experts = gpu_activation_plan(spec, T, Recompute::Experts);
  const ActivationPlan full = gpu_activation_plan(spec, T, Recompute::Full);
  const auto stash = [](const ActivationPlan& p, const std::string& kind) {
    for (const auto& [name, bytes] : p.stash)
      if (name == kind) return bytes;
    return int64_t(-1);
  };
  EXPECT_EQ(stash(experts, "moe"), 4 * (input + 2 * 128 * 4));  // inputs, and the counts kept for telemetry
  // Attention keeps its stash, without its norm's output (T x 2048 bf16, an input's size): with recomputation the
  // norms are recomputed everywhere (model/recompute.h keeps_outputs).
  EXPECT_EQ(stash(experts, "attention") + 4 * input, stash(none, "attention"));
  EXPECT_EQ(stash(full, "attention"), 4 * input);
  EXPECT_EQ(full.stash_bytes, 8 * input + 4 * 2 * 128 * 4 + input /* the head's */);
  // The whole of one MoE layer's stash comes back in its backward pass, on top of that backward's temporaries.
  const SublayerSpec& moe = spec.layers[0].sublayers[1];
  const int64_t rows = T * 8;
  EXPECT_EQ(experts.peak_phase, "recomputed moe backward");
  // The backward's temporaries where the experts' gradients meet: d(expert_out) [rows, 2048] beside d(gate_up)
  // [rows, 2 x 768] and d(activated) [rows, 768]; the incoming gradient; the routing weights' gradient.
  EXPECT_EQ(experts.transient_bytes, gpu_stash_bytes(moe, 2048, T, /*keep_outputs=*/false) - input + input +
                                         rows * (2048 + 3 * 768) * 2 + rows * 4);
  EXPECT_LT(experts.total(), none.total());
  EXPECT_LT(full.total(), experts.total());
}

// training.lm_head_chunk_rows: the plan holds the chunk of logits the op is told to use, and the fit sees it.
TEST(RecomputePlan, LmHeadChunkRowsSizeTheHeadsLogits) {
  const ModelSpec spec = qwen3_30b_a3b(4);  // vocabulary 151,936: 2048 rows by default (ops/lm_head_chunk.h)
  const int64_t T = 8192, head_inputs = 2 * T * 2048 * 2;
  const ActivationPlan automatic = gpu_activation_plan(spec, T, Recompute::Full);
  const ActivationPlan asked = gpu_activation_plan(spec, T, Recompute::Full, 0, 2048);
  const ActivationPlan whole = gpu_activation_plan(spec, T, Recompute::Full, 0, 8192);
  EXPECT_EQ(asked.transient_bytes, automatic.transient_bytes);
  EXPECT_EQ(whole.peak_phase, "lm head + loss");
  EXPECT_EQ(whole.transient_bytes, head_inputs + T * 151936 * 2);
  const ParameterLayout layout = parameter_layout(spec);
  const PrecisionPlan& bf16 = train::precision_plan("pure_bf16", "fp32");
  EXPECT_EQ(train::planned_peak_bytes(layout, bf16, T, Recompute::Full, false, {}, 0, 8192) -
                train::planned_peak_bytes(layout, bf16, T, Recompute::Full),
            whole.total() - automatic.total());
}

TEST(MicroBatchFit, LargestMicroBatchThatFitsThenRecomputation) {
  const ParameterLayout layout = parameter_layout(qwen3_30b_a3b(12));
  const PrecisionPlan& bf16 = train::precision_plan("pure_bf16", "fp32");
  const int64_t h200 = int64_t(150e9);
  const train::MicroBatchFit fit = train::fit_micro_batch(layout, bf16, 4096, h200, Recompute::None);
  ASSERT_GE(fit.micro_batch_size, 1) << fit.reason;
  EXPECT_EQ(fit.recompute, Recompute::None);
  EXPECT_LE(fit.planned_bytes, fit.usable_bytes);
  if (fit.micro_batch_size < 4) {  // the cap: 16 K tokens
    EXPECT_GT(train::planned_peak_bytes(layout, bf16, (fit.micro_batch_size + 1) * 4096, Recompute::None), fit.usable_bytes);
  }
  EXPECT_NE(fit.reason.find("recompute none"), std::string::npos) << fit.reason;

  // A GPU where one row fits only with recomputation: the fit turns it on rather than fail.
  const int64_t static_bytes = train::planned_peak_bytes(layout, bf16, 0, Recompute::None) - gpu_activation_plan(layout.spec, 0).total();
  const int64_t tight = int64_t(double(static_bytes + gpu_activation_plan(layout.spec, 4096, Recompute::Full).total() + int64_t(1.6e9)) / 0.96) + 1;
  const train::MicroBatchFit squeezed = train::fit_micro_batch(layout, bf16, 4096, tight, Recompute::None);
  EXPECT_EQ(squeezed.micro_batch_size, 1) << squeezed.reason;
  EXPECT_NE(squeezed.recompute, Recompute::None) << squeezed.reason;

  // Too small for anything: the reason says what would help.
  const train::MicroBatchFit none = train::fit_micro_batch(layout, bf16, 4096, int64_t(40e9), Recompute::None);
  EXPECT_EQ(none.micro_batch_size, 0);
  EXPECT_NE(none.reason.find("not even one row"), std::string::npos) << none.reason;
  EXPECT_NE(none.reason.find("optimizer.state int8"), std::string::npos) << none.reason;
}

}  // namespace
}  // namespace moetune::model
