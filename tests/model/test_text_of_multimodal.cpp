// A vision-language checkpoint trained on its text (model/families/text_of_multimodal.h):
// Gemma3ForConditionalGeneration made from gemma3_tiny (transformers' Gemma3ForCausalLM) the way transformers 5.17
// saves one — its text_config nested, the language model under language_model.model.* / language_model.lm_head.*, a
// vision tower and a projector beside it — computes exactly what the text model computes, and saves back with the
// vision tensors and config.json unchanged. (tests/reference/sweep_config_parity.py checks such models against
// transformers' Gemma3ForConditionalGeneration itself.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/io/json_file.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/model_description.h"
#include "moetune/moetune.h"
#include "moetune/ops/cast.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using nlohmann::json;
using testing::ScratchDir;

struct Spelling {
  std::string decoder, head, vision, projector;
};
// What transformers 5.17's save_pretrained writes, and the names its model holds in memory (which it loads too).
const Spelling kOnDisk{"language_model.model.", "language_model.lm_head.", "vision_tower.", "multi_modal_projector."};
const Spelling kInMemory{"model.language_model.", "lm_head.", "model.vision_tower.", "model.multi_modal_projector."};

json wrapper_config(bool tied) {
  json text = io::read_json_file(testing::fixture("gemma3_tiny") / "config.json");
  text.erase("architectures");
  text.erase("tie_word_embeddings");  // the wrapper's own field decides
  return {{"architectures", {"Gemma3ForConditionalGeneration"}},
          {"model_type", "gemma3"},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "siglip_vision_model"}, {"hidden_size", 4}, {"image_size", 4}, {"patch_size", 2}}},
          {"mm_tokens_per_image", 4},
          {"image_token_index", 95},
          {"tie_word_embeddings", tied}};
}

// gemma3_tiny's tensors under `spelling`, plus a vision tensor (f32) and a projector tensor (bf16) of known bytes.
// Untied, the head is a copy of the embedding's values (the same numbers, trained apart).
io::NamedTensors wrapper_tensors(const Spelling& spelling, bool tied) {
  const io::SafetensorsFolder text = io::SafetensorsFolder::open(testing::fixture("gemma3_tiny"));
  io::NamedTensors tensors;
  for (const std::string& name : text.names()) {
    EXPECT_TRUE(name.starts_with("model.")) << name;
    tensors.emplace_back(spelling.decoder + name.substr(6), text.tensor(name).clone());
  }
  if (!tied) tensors.emplace_back(spelling.head + "weight", text.tensor("model.embed_tokens.weight").clone());
  std::vector<float> patch(4 * 3 * 2 * 2);
  for (size_t i = 0; i < patch.size(); ++i) patch[i] = 0.25f * float(i) - 3.0f;
  tensors.emplace_back(spelling.vision + "embeddings.patch_embedding.weight", Tensor::from_vector(patch, {4, 3, 2, 2}));
  tensors.emplace_back(spelling.projector + "mm_soft_emb_norm.weight",
                       ops::cast(Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 0.125f, 7.0f}, {4}), DType::BF16));
  return tensors;
}

void make_wrapper(const std::filesystem::path& folder, const Spelling& spelling, bool tied) {
  std::filesystem::create_directories(folder);
  io::save_safetensors(folder / "model.safetensors", wrapper_tensors(spelling, tied));
  testing::write_file(folder / "config.json", wrapper_config(tied).dump(2));
}

Tensor some_ids() {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < 14; ++i) values.push_back((i * 37 + 5) % 96);
  return Tensor::from_vector(values, {1, 14});
}

TEST(TextOfMultimodal, Gemma3ConditionalGenerationIsItsLanguageModel) {
  for (const Spelling* spelling : {&kOnDisk, &kInMemory}) {
    ScratchDir dir;
    make_wrapper(dir / "vl", *spelling, /*tied=*/true);
    const ModelSpec spec = load_model_spec_for(dir / "vl");
    EXPECT_EQ(spec.architecture, "Gemma3ForConditionalGeneration");
    EXPECT_EQ(spec.checkpoint_names.decoder, spelling->decoder);
    EXPECT_TRUE(spec.tie_word_embeddings);

    AutoModelForCausalLM text = AutoModelForCausalLM::from_pretrained(testing::fixture("gemma3_tiny"));
    AutoModelForCausalLM wrapped = AutoModelForCausalLM::from_pretrained(dir / "vl");
    const Tensor ids = some_ids();
    const CausalLMOutput expected = text.forward({.input_ids = ids, .labels = ids});
    text.backward();
    const CausalLMOutput actual = wrapped.forward({.input_ids = ids, .labels = ids});
    wrapped.backward();
    EXPECT_EQ(actual.loss, expected.loss) << spelling->decoder;
    EXPECT_TRUE(actual.logits.same_bytes(expected.logits)) << spelling->decoder;
    ASSERT_EQ(wrapped.parameters().grads().size(), text.parameters().grads().size());
    for (size_t i = 0; i < text.parameters().grads().size(); ++i)
      EXPECT_TRUE(wrapped.parameters().grads()[i].same_bytes(text.parameters().grads()[i])) << i;
  }
}

TEST(TextOfMultimodal, SavesTheVisionTowerAndConfigBack) {
  for (const Spelling* spelling : {&kOnDisk, &kInMemory})
    for (const bool tied : {true, false}) {
      ScratchDir dir;
      make_wrapper(dir / "vl", *spelling, tied);
      ModelWeights weights = load_checkpoint(dir / "vl", LoadOptions{DType::F32});
      EXPECT_EQ(weights.carried.size(), 2u);
      EXPECT_EQ(weights.spec().tie_word_embeddings, tied);
      save_checkpoint(weights, dir / "saved");
      // Every tensor back under its own name with its own bytes (the text ones through the engine's fp32).
      const io::SafetensorsFolder before = io::SafetensorsFolder::open(dir / "vl");
      const io::SafetensorsFolder after = io::SafetensorsFolder::open(dir / "saved");
      ASSERT_EQ(before.names(), after.names()) << spelling->decoder << " tied " << tied;
      for (const std::string& name : before.names())
        EXPECT_TRUE(before.tensor(name).same_bytes(after.tensor(name))) << name;
      EXPECT_EQ(io::read_json_file(dir / "saved" / "config.json"), wrapper_config(tied));
    }
}

TEST(TextOfMultimodal, InspectCountsTheVisionTowerAsTransformersDoes) {
  ScratchDir dir;
  make_wrapper(dir / "vl", kOnDisk, /*tied=*/true);
  const testing::RunResult text =
      testing::run_moetune("inspect " + testing::fixture("gemma3_tiny").string() + " --json");
  const testing::RunResult wrapped = testing::run_moetune("inspect " + (dir / "vl").string() + " --json");
  ASSERT_EQ(text.status, 0) << text.output;
  ASSERT_EQ(wrapped.status, 0) << wrapped.output;
  const int64_t text_total = json::parse(text.output)["total_parameters"];
  const json report = json::parse(wrapped.output);
  EXPECT_EQ(report["carried_parameters"], 4 * 3 * 2 * 2 + 4);
  EXPECT_EQ(report["total_parameters"], text_total + 4 * 3 * 2 * 2 + 4);
  EXPECT_EQ(report["architecture"], "Gemma3ForConditionalGeneration");
}

TEST(TextOfMultimodal, LoraAddressesTheLanguageModelAsPeftDoes) {
  ScratchDir dir;
  make_wrapper(dir / "vl", kOnDisk, /*tied=*/true);
  ModelWeights weights = load_checkpoint(dir / "vl", LoadOptions{DType::F32});
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.target_modules = {"q_proj", "o_proj"};
  attach_lora(weights, lora);
  save_adapter(weights, dir / "adapter");
  const json config = io::read_json_file(dir / "adapter" / "adapter_config.json");
  const std::vector<std::string> modules = config["target_modules"];
  ASSERT_FALSE(modules.empty());
  for (const std::string& module : modules) EXPECT_TRUE(module.starts_with("model.language_model.layers.")) << module;
  const io::SafetensorsFile adapter = io::SafetensorsFile::open(dir / "adapter" / "adapter_model.safetensors");
  ASSERT_FALSE(adapter.entries().empty());
  for (const io::SafetensorsEntry& entry : adapter.entries())
    EXPECT_TRUE(entry.name.starts_with("base_model.model.model.language_model.layers.")) << entry.name;
}

TEST(TextOfMultimodal, RefusesAnotherLanguageModel) {
  json config = wrapper_config(true);
  config["text_config"]["model_type"] = "llama";
  try {
    describe_model(config, "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("text_config.model_type"), std::string::npos) << message;
    EXPECT_NE(message.find("'llama'"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace moetune::model
