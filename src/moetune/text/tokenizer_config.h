// What transformers does to a model folder's tokenizer.json beyond reading it (tokenizer_config.cpp says what and
// why): LlamaTokenizer's own pipeline for Llama folders that name it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

namespace moetune::text {

// Rewrites the parsed tokenizer.json of `folder` as transformers 5.x builds it, when it does more than read it.
void apply_transformers_tokenizer_class(nlohmann::json& tokenizer, const std::filesystem::path& folder);

}  // namespace moetune::text
