// Parameters, gradients and AdamW state live in flat per-dtype buffers (one run per placement); a frozen parameter has no gradient and
// no optimizer state, stays unchanged, and leaves every other gradient exactly as it was.
#include <gtest/gtest.h>

#include "moetune/moetune.h"
#include "test_util.h"

namespace moetune {
namespace {

Tensor token_batch() {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2 * 8; ++i) ids.push_back((i * 13 + 5) % 96);
  return Tensor::from_vector(ids, {2, 8});
}

// Each view starts after the previous one ends, no further than the alignment padding: one buffer, in order.
void expect_packed(const std::vector<Tensor>& views) {
  const char* end = nullptr;
  for (const Tensor& view : views) {
    if (!view.defined()) continue;
    const char* start = static_cast<const char*>(view.raw_data());
    if (end) {
      EXPECT_GE(start, end);
      EXPECT_LT(start - end, ptrdiff_t(kFlatAlignmentBytes));
    }
    end = start + view.nbytes();
  }
}

// The views of one placement (model/placed_buffers.h: replicated and expert parameters are separate runs, so
// ZeRO can shard each over its own ranks).
std::vector<Tensor> placed(const std::vector<Tensor>& views, const model::ParameterLayout& layout, model::Placement placement) {
  std::vector<Tensor> kept;
  for (size_t i = 0; i < views.size(); ++i)
    if (layout.parameters[i].placement == placement) kept.push_back(views[i]);
  return kept;
}

TEST(FlatStorage, ParametersGradientsAndMomentsArePacked) {
  auto model = AutoModelForCausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  const model::ParameterLayout& layout = model.weights().layout;
  for (const model::Placement placement : {model::Placement::Replicated, model::Placement::ExpertSharded}) {
    EXPECT_FALSE(placed(model.parameters().values(), layout, placement).empty());
    expect_packed(placed(model.parameters().values(), layout, placement));
    expect_packed(placed(model.parameters().grads(), layout, placement));
  }
  AdamW optimizer(model.parameters().values(), model.parameters().grads(), {.lr = 1e-3});
  expect_packed(optimizer.first_moments());
  expect_packed(optimizer.second_moments());
}

TEST(FlatStorage, FrozenParametersHaveNoGradientNoStateAndStayPut) {
  const std::vector<std::string> frozen = {"embed_tokens", "layers.0.attn.qkv", "layers.*.moe.router", "layers.0.moe.experts_*",
                                           "final_norm"};
  auto full = model::CausalLM::from_weights(model::load_checkpoint(testing::fixture("qwen3_moe_tiny"), {DType::F32}));
  auto partial = model::CausalLM::from_weights(
      model::load_checkpoint(testing::fixture("qwen3_moe_tiny"), {.dtype = DType::F32, .frozen = frozen}));
  const Tensor ids = token_batch();
  for (auto* m : {&full, &partial}) {
    m->forward({.input_ids = ids, .labels = ids});
    m->backward();
  }
  const auto& specs = partial.weights().layout.parameters;
  int frozen_count = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool is_frozen = !specs[i].trainable;
    frozen_count += is_frozen;
    EXPECT_EQ(partial.parameters().grads()[i].defined(), !is_frozen) << specs[i].name;
    // The other gradients are exactly those of the unfrozen model: freezing only skips work.
    if (!is_frozen) {
      EXPECT_TRUE(partial.parameters().grads()[i].same_bytes(full.parameters().grads()[i])) << specs[i].name;
    }
  }
  EXPECT_EQ(frozen_count, 1 + 1 + 2 + 2 + 1);  // qwen3_moe_tiny: layers 0 and 2 are MoE

  const std::vector<Tensor> before = [&] {
    std::vector<Tensor> copies;
    for (const Tensor& v : partial.parameters().values()) copies.push_back(v.clone());
    return copies;
  }();
  AdamW optimizer(partial.parameters().values(), partial.parameters().grads(), {.lr = 1e-2});
  optimizer.step();
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(optimizer.first_moments()[i].defined(), specs[i].trainable) << specs[i].name;
    EXPECT_EQ(partial.parameters().values()[i].same_bytes(before[i]), !specs[i].trainable) << specs[i].name;
  }
}

TEST(FlatStorage, FreezePatternsMatchEngineNames) {
  EXPECT_TRUE(model::name_matches("layers.*.moe.router", "layers.12.moe.router"));
  EXPECT_FALSE(model::name_matches("layers.*.moe.router", "layers.12.moe.router_bias"));
  EXPECT_TRUE(model::name_matches("*", "lm_head"));
  EXPECT_TRUE(model::name_matches("layers.0.moe.experts_*", "layers.0.moe.experts_down"));
  EXPECT_FALSE(model::name_matches("layers.0.*", "layers.10.attn.o"));
  try {
    model::load_checkpoint(testing::fixture("qwen3_moe_tiny"), {.frozen = {"layers.*.mlp.router"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.*.mlp.router'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune
