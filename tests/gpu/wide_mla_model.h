// A DeepSeek-V3 whose latent-attention heads take the GPU's in-place paths (every width a multiple of 8, as
// Moonlight's and DeepSeek-V3's are: q rotated in place in q_proj's output, v read in kv_b's, the rope key in
// kv_a's), which the transformers fixtures' narrow heads do not: deepseek_v3_tiny's config with heads of nope 16,
// rope 8, v 16 (q/k 24), latent 16, every layer dense (no routing, whose near-ties could pick other experts in
// bf16 than in fp32), saved with random bf16 weights into `folder`.
#pragma once

#include <filesystem>
#include <random>

namespace moetune::testing {

std::filesystem::path write_wide_mla_model(const std::filesystem::path& folder, std::mt19937& rng);

}  // namespace moetune::testing
