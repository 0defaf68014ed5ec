#include "moetune/model/families/text_of_multimodal.h"

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/io/config_reader.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// transformers 5.17's spellings: Gemma 3's are conversion_mapping.py's "llava" renamings (save_pretrained writes
// language_model.model.*, the model holds model.language_model.*); Qwen3.5's wrappers save what they hold.
const MultimodalWrapper kWrappers[] = {
    {"Gemma3ForConditionalGeneration",
     "gemma3",
     "gemma3_text",
     "language_model.model.",
     "language_model.lm_head.",
     "model.language_model.",
     "lm_head.",
     {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."},
     /*ties_by_default=*/true},
    {"Qwen3_5ForConditionalGeneration",
     "qwen3_5",
     "qwen3_5_text",
     "model.language_model.",
     "lm_head.",
     "model.language_model.",
     "lm_head.",
     {"model.visual."},
     /*ties_by_default=*/false},
    {"Qwen3_5MoeForConditionalGeneration",
     "qwen3_5_moe",
     "qwen3_5_moe_text",
     "model.language_model.",
     "lm_head.",
     "model.language_model.",
     "lm_head.",
     {"model.visual."},
     /*ties_by_default=*/false},
};

}  // namespace

std::span<const MultimodalWrapper> multimodal_wrappers() { return kWrappers; }

const MultimodalWrapper* find_multimodal_wrapper(const json& config) {
  const io::ConfigReader r(config);
  const std::string model_type = r.string("model_type", "");
  std::string architecture;
  if (const json* architectures = r.find("architectures");
      architectures && architectures->is_array() && !architectures->empty() && (*architectures)[0].is_string())
    architecture = (*architectures)[0].get<std::string>();
  // As model_description.cpp's resolve_family: model_type decides; architectures[0] where model_type names nothing
  // known (a remote-code config of a known architecture).
  const auto is_family = [&](const Family* family) { return model_type == family->model_type; };
  const bool known_type = std::any_of(families().begin(), families().end(), is_family);
  for (const MultimodalWrapper& wrapper : kWrappers)
    if (model_type == wrapper.model_type || (!known_type && architecture == wrapper.architecture)) return &wrapper;
  return nullptr;
}

ModelSpec describe_text_of_multimodal(const MultimodalWrapper& wrapper, const json& config, const Family& text_family) {
  const io::ConfigReader top(config);
  json text = json::object();
  if (const json* found = top.find("text_config")) {
    if (!found->is_object()) fail("'text_config' must be an object (the language model's config)");
    text = *found;
  }
  const std::string text_type = io::ConfigReader(text).string("model_type", wrapper.text_model_type);
  if (text_type != wrapper.text_model_type)
    fail("'text_config.model_type' is '{}', but {} holds a '{}' language model", text_type.substr(0, 100),
         wrapper.architecture, wrapper.text_model_type);
  // The wrapper's own field decides the tie (transformers reads the top-level config's tie_word_embeddings: True by
  // default in Gemma3Config, False in Qwen3.5's); the dtype is written at the top level only.
  text["tie_word_embeddings"] = top.boolean("tie_word_embeddings", wrapper.ties_by_default);
  for (const char* key : {"dtype", "torch_dtype"})
    if (!text.contains(key) && config.contains(key)) text[key] = config[key];
  ModelSpec spec = with_context("text_config", [&] { return text_family.describe(io::ConfigReader(text)); });
  spec.checkpoint_names = {.decoder = wrapper.decoder_on_disk,
                           .head = wrapper.head_on_disk,
                           .carried = {wrapper.carried.begin(), wrapper.carried.end()},
                           .decoder_in_memory = wrapper.decoder_in_memory,
                           .head_in_memory = wrapper.head_in_memory};
  return spec;
}

void follow_checkpoint_spelling(ModelSpec& spec, const io::SafetensorsFolder& files) {
  ModelSpec::CheckpointNames& names = spec.checkpoint_names;
  const std::string embedding = "embed_tokens.weight";
  if (!files.contains(names.decoder + embedding) && files.contains(names.decoder_in_memory + embedding)) {
    names.decoder = names.decoder_in_memory;
    names.head = names.head_in_memory;
  }
}

}  // namespace moetune::model
