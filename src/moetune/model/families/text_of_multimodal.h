// Vision-language checkpoints fine-tuned on their text alone: Gemma3ForConditionalGeneration (gemma-3-4b / 12b /
// 27b and their -it and MedGemma variants; model_type gemma3) and Qwen3_5ForConditionalGeneration /
// Qwen3_5MoeForConditionalGeneration (Qwen3.5; model_type qwen3_5 / qwen3_5_moe). Without images, transformers 5.17
// runs exactly the language model (its text_config, read by the text family) on the tokens, and its loss is the
// causal LM's; so the engine trains that language model and carries the vision tower and the projector through:
// read from the folder, never run or trained, saved back bit for bit beside the trained text weights, with
// config.json unchanged, so transformers loads the saved folder as the same vision-language model. (transformers'
// AutoModelForCausalLM builds Gemma 3's wrapper for such a folder, and Qwen3.5's text model alone, dropping the
// vision tower; moetune keeps it for both.)
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "moetune/io/safetensors_folder.h"
#include "moetune/model/families/family.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

struct MultimodalWrapper {
  const char* architecture;     // "Gemma3ForConditionalGeneration"
  const char* model_type;       // "gemma3"
  const char* text_model_type;  // the text family that reads text_config: "gemma3_text"
  // The language model's names as save_pretrained writes them and as the model holds them in memory (PEFT's adapter
  // keys); a checkpoint may use either (follow_checkpoint_spelling).
  const char* decoder_on_disk;       // "language_model.model."
  const char* head_on_disk;          // "language_model.lm_head."
  const char* decoder_in_memory;     // "model.language_model."
  const char* head_in_memory;        // "lm_head."
  std::vector<const char*> carried;  // prefixes of the tensors carried through (vision tower, projector)
  bool ties_by_default;              // the wrapper config's tie_word_embeddings default
};

// Every wrapper the engine reads.
std::span<const MultimodalWrapper> multimodal_wrappers();

// The wrapper config.json's model_type or architectures[0] names, or null (every other config).
const MultimodalWrapper* find_multimodal_wrapper(const nlohmann::json& config);

// The language model's description: text_config read by `text_family`, with the keys transformers reads from the
// top level instead (tie_word_embeddings, the dtype), the wrapper's checkpoint names, and the whole config kept to
// be saved back.
ModelSpec describe_text_of_multimodal(const MultimodalWrapper& wrapper, const nlohmann::json& config,
                                      const Family& text_family);

// transformers 5.17 writes Gemma 3's language model as language_model.model.* / language_model.lm_head.* and reads
// that or its in-memory spelling, model.language_model.* / lm_head.*: the names follow the folder's files (saving
// keeps them). A no-op for a ForCausalLM and for Qwen3.5's wrappers, whose two spellings are the same.
void follow_checkpoint_spelling(ModelSpec& spec, const io::SafetensorsFolder& files);

}  // namespace moetune::model
