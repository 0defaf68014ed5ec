// Small models with random weights saved as an HF folder, for GPU tests whose shapes the transformers fixtures do
// not have.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

namespace moetune::testing {

// `config` written as config.json and its parameters drawn at random (norm weights near 1, buffers 0, the rest
// N(0, 0.1²)), saved as bf16 into `folder`.
std::filesystem::path write_random_model(const std::filesystem::path& folder, const nlohmann::json& config,
                                         std::mt19937& rng);

// A DeepSeek-V3 whose latent-attention heads take the GPU's in-place paths (every width a multiple of 8, as
// Moonlight's and DeepSeek-V3's are: q rotated in place in q_proj's output, v read in kv_b's, the rope key in
// kv_a's), which the transformers fixtures' narrow heads do not: deepseek_v3_tiny's config with heads of nope 16,
// rope 8, v 16 (q/k 24), latent 16, every layer dense (no routing, whose near-ties could pick other experts in
// bf16 than in fp32).
std::filesystem::path write_wide_mla_model(const std::filesystem::path& folder, std::mt19937& rng);

}  // namespace moetune::testing
