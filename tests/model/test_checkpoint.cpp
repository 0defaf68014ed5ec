// Loading a Hugging Face folder into the engine's fused layout and saving it back is bit-exact, tensor by
// tensor, for every fixture and every way of holding the weights.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/io/safetensors.h"
#include "moetune/model/checkpoint.h"
#include "moetune/ops/cast.h"
#include "test_util.h"

namespace moetune::model {

using io::SafetensorsFolder;
using io::SaveOptions;
namespace {

using testing::ScratchDir;

void expect_same_tensors(const std::filesystem::path& expected_dir, const std::filesystem::path& actual_dir) {
  SafetensorsFolder expected = SafetensorsFolder::open(expected_dir), actual = SafetensorsFolder::open(actual_dir);
  ASSERT_EQ(expected.names(), actual.names());
  for (const auto& name : expected.names()) {
    Tensor a = expected.tensor(name), b = actual.tensor(name);
    EXPECT_TRUE(a.same_bytes(b)) << name << ": " << a.str() << " vs " << b.str();
  }
}

TEST(Checkpoint, RoundTripIsBitExactInTheCheckpointDtype) {
  for (const std::string& name : testing::model_fixtures()) {
    ScratchDir out;
    ModelWeights weights = load_checkpoint(testing::fixture(name));
    save_checkpoint(weights, out.path());
    expect_same_tensors(testing::fixture(name), out.path());
    EXPECT_TRUE(std::filesystem::exists(out / "generation_config.json")) << name;
  }
}

TEST(Checkpoint, RoundTripThroughF32EngineWeightsIsBitExact) {
  for (const std::string& name : testing::model_fixtures()) {
    ScratchDir out;
    ModelWeights weights = load_checkpoint(testing::fixture(name), LoadOptions{DType::F32});
    for (const Tensor& p : weights.parameters) EXPECT_EQ(p.dtype(), DType::F32);
    save_checkpoint(weights, out.path(), SaveOptions{20000});  // and re-sharded differently
    expect_same_tensors(testing::fixture(name), out.path());
  }
}

TEST(Checkpoint, ExpertsAreStackedAndFused) {
  ModelWeights weights = load_checkpoint(testing::fixture("qwen3_moe_tiny"), LoadOptions{DType::F32});
  const ModelSpec& spec = weights.spec();
  const MoeSpec& moe = *spec.layers[0].moe();
  const AttentionSpec& attention = spec.first_attention();
  const int64_t experts = moe.router.num_experts, inner = moe.experts.intermediate, hidden = spec.hidden_size;
  const Tensor& gate_up = weights.parameter("layers.0.moe.experts_gate_up");
  const Tensor& down = weights.parameter("layers.0.moe.experts_down");
  EXPECT_EQ(gate_up.shape(), Shape({experts, 2 * inner, hidden}));
  EXPECT_EQ(down.shape(), Shape({experts, hidden, inner}));
  SafetensorsFolder files = SafetensorsFolder::open(testing::fixture("qwen3_moe_tiny"));
  // Expert 2's up rows are the second half of its [2I, H] block.
  Tensor up = ops::cast(files.tensor("model.layers.0.mlp.experts.2.up_proj.weight"), DType::F32);
  EXPECT_TRUE(gate_up[2].narrow(inner, inner).clone().same_bytes(up));
  Tensor expert_down = ops::cast(files.tensor("model.layers.0.mlp.experts.3.down_proj.weight"), DType::F32);
  EXPECT_TRUE(down[3].clone().same_bytes(expert_down));
  // Layer 1 is in mlp_only_layers: a dense MLP, gate and up fused.
  EXPECT_EQ(weights.parameter("layers.1.mlp.gate_up").shape(), Shape({2 * spec.layers[1].sublayers[1].mlp()->intermediate, hidden}));
  // q, k, v fused in that order.
  const Tensor& qkv = weights.parameter("layers.0.attn.qkv");
  Tensor k = ops::cast(files.tensor("model.layers.0.self_attn.k_proj.weight"), DType::F32);
  EXPECT_TRUE(qkv.narrow(attention.num_heads * attention.qk_head_dim, k.size(0)).clone().same_bytes(k));
}

TEST(Checkpoint, V5FusedExpertTensorsLoadAndSaveBack) {
  // A folder holding mlp.experts.gate_up_proj / down_proj as transformers v5 keeps them in memory.
  ScratchDir fused, out;
  ModelWeights weights = load_checkpoint(testing::fixture("qwen3_moe_tiny"));
  for (size_t i = 0; i < weights.parameters.size(); ++i) weights.stored_fused[i] = !weights.layout.parameters[i].fused_hf_name.empty();
  save_checkpoint(weights, fused.path());
  EXPECT_TRUE(SafetensorsFolder::open(fused.path()).contains("model.layers.0.mlp.experts.gate_up_proj"));
  ModelWeights reloaded = load_checkpoint(fused.path());
  for (size_t i = 0; i < weights.parameters.size(); ++i)
    EXPECT_TRUE(reloaded.parameters[i].same_bytes(weights.parameters[i])) << weights.layout.parameters[i].name;
  // Saved per expert again, it matches the original folder.
  std::fill(reloaded.stored_fused.begin(), reloaded.stored_fused.end(), false);
  save_checkpoint(reloaded, out.path());
  expect_same_tensors(testing::fixture("qwen3_moe_tiny"), out.path());
}

TEST(Checkpoint, TiedModelsHaveNoLmHead) {
  ModelWeights weights = load_checkpoint(testing::fixture("qwen3_tiny"));
  EXPECT_TRUE(weights.spec().tie_word_embeddings);
  EXPECT_THROW(weights.parameter("lm_head"), Error);
}

// transformers' tie_weights: a tied config whose files hold a differing lm_head.weight loads untied (both trained);
// an equal copy (in any dtype) is the embedding itself.
TEST(Checkpoint, TiedConfigWithADifferingHeadLoadsUntied) {
  ScratchDir differing, equal, out;
  const SafetensorsFolder original = SafetensorsFolder::open(testing::fixture("qwen3_tiny"));
  io::NamedTensors tensors;
  for (const std::string& name : original.names()) tensors.emplace_back(name, original.tensor(name));
  const Tensor embedding = original.tensor("model.embed_tokens.weight");
  std::filesystem::copy_file(testing::fixture("qwen3_tiny") / "config.json", differing.path() / "config.json");
  std::filesystem::copy_file(testing::fixture("qwen3_tiny") / "config.json", equal.path() / "config.json");
  io::NamedTensors with_copy = tensors;
  with_copy.emplace_back("lm_head.weight", ops::cast(embedding, DType::F32));  // the same values, another dtype
  io::save_safetensors(equal.path() / "model.safetensors", with_copy);
  EXPECT_TRUE(load_checkpoint(equal.path()).spec().tie_word_embeddings);
  Tensor head = ops::cast(embedding, DType::F32);
  head.data<float>()[0] += 1.0f;
  tensors.emplace_back("lm_head.weight", ops::cast(head, embedding.dtype()));
  io::save_safetensors(differing.path() / "model.safetensors", tensors);
  ModelWeights weights = load_checkpoint(differing.path());
  EXPECT_FALSE(weights.spec().tie_word_embeddings);
  EXPECT_TRUE(weights.parameter("lm_head").same_bytes(ops::cast(head, embedding.dtype())));
  save_checkpoint(weights, out.path());
  const SafetensorsFolder saved = SafetensorsFolder::open(out.path());
  EXPECT_TRUE(saved.contains("lm_head.weight"));
  EXPECT_TRUE(saved.tensor("model.embed_tokens.weight").same_bytes(embedding));
}

TEST(Checkpoint, GpuLoadRoundTrips) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
  ScratchDir out;
  ModelWeights weights = load_checkpoint(testing::fixture("qwen3_moe_tied_bf16"), LoadOptions{DType::F32, Device::cuda()});
  EXPECT_TRUE(weights.parameters[0].device().is_cuda());
  save_checkpoint(weights, out.path());
  expect_same_tensors(testing::fixture("qwen3_moe_tied_bf16"), out.path());
}

// Another family's layer past the last is skipped too (with a note on stderr), as transformers leaves it unused;
// a stray tensor that is not a whole layer's is still refused (tests/io/test_safetensors_bad_input.cpp).
TEST(Checkpoint, LayerPastTheLastIsSkippedAndNotSaved) {
  ScratchDir with_extra, saved;
  io::NamedTensors tensors = to_hf_tensors(load_checkpoint(testing::fixture("qwen2_moe_tiny")));
  tensors.emplace_back("model.layers.3.input_layernorm.weight", Tensor::zeros({32}, DType::F32));
  io::save_safetensors_folder(with_extra.path(), tensors);
  std::filesystem::copy_file(testing::fixture("qwen2_moe_tiny") / "config.json", with_extra / "config.json");
  const ModelWeights loaded = load_checkpoint(with_extra.path());
  EXPECT_EQ(loaded.layout.spec.num_layers(), 3);
  save_checkpoint(loaded, saved.path());
  EXPECT_EQ(SafetensorsFolder::open(saved.path()).names().size(), tensors.size() - 1);
}

// A config cut to fewer layers than its files hold (a common way to make a small model of a large one) loads the
// first layers, as transformers does, and the saved folder holds only those.
TEST(Checkpoint, ConfigCutToFewerLayersLoadsTheFirstOnes) {
  ScratchDir cut, saved;
  const ModelWeights whole = load_checkpoint(testing::fixture("qwen2_moe_tiny"));
  io::save_safetensors_folder(cut.path(), to_hf_tensors(whole));
  nlohmann::json config = nlohmann::json::parse(testing::read_file(testing::fixture("qwen2_moe_tiny") / "config.json"));
  config["num_hidden_layers"] = 2;
  // transformers checks layer_types' length against num_hidden_layers (so does moetune): cut it the same way.
  if (config.contains("layer_types")) config["layer_types"].erase(2);
  testing::write_file(cut / "config.json", config.dump());
  const ModelWeights loaded = load_checkpoint(cut.path());
  ASSERT_EQ(loaded.layout.spec.num_layers(), 2);
  for (size_t i = 0; i < loaded.layout.parameters.size(); ++i) {
    const Tensor* original = whole.find(loaded.layout.parameters[i].name);
    ASSERT_NE(original, nullptr) << loaded.layout.parameters[i].name;
    EXPECT_TRUE(loaded.parameters[i].same_bytes(*original)) << loaded.layout.parameters[i].name;
  }
  save_checkpoint(loaded, saved.path());
  for (const std::string& name : SafetensorsFolder::open(saved.path()).names())
    EXPECT_FALSE(name.starts_with("model.layers.2.")) << name;
}

}  // namespace
}  // namespace moetune::model
