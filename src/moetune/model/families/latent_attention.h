// DeepSeek-V3's multi-head latent attention as configs spell it, shared by the families that use it
// (DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM): the attention spec (MlaSpec, RoPE on the rope part only, the
// softmax scale with YaRN's mscale), its tensors in transformers' module order, and the FP8 block-scaled
// checkpoints DeepSeek's releases use.
#pragma once

#include <vector>

#include "moetune/io/config_reader.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// The config classes' defaults, which differ between the families.
struct LatentAttentionDefaults {
  int64_t q_lora_rank = 1536, kv_lora_rank = 512, qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128;
};

AttentionSpec read_latent_attention(const io::ConfigReader& config, const DecoderConfig& decoder,
                                    const LatentAttentionDefaults& defaults);

// quantization_config: absent, or FP8 e4m3 block-scaled (dequantised on load: model/fp8_dequantize.h); anything
// else is refused naming it.
void accept_fp8_quantization_only(const io::ConfigReader& config);

// The usual decoder's parameters (shared_experts named so) with each layer's q/k/v attention replaced by MLA's
// tensors.
std::vector<ParameterSpec> latent_attention_decoder_parameters(const ModelSpec& spec);

}  // namespace moetune::model
