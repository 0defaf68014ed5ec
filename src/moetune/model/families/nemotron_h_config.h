// Nemotron-H's config.json (NemotronHConfig in transformers 5.17) read into types, with every spelling that
// config class accepts: the layer pattern from layers_block_type (or layer_types), its legacy names ("mamba",
// "attention"), or the older hybrid_override_pattern string (M, E, *, -); mamba_n_groups, mamba_d_conv,
// mamba_expand, mamba_dt_min/max/limit/init_floor, mamba_conv_bias, mamba_chunk_size for their plain names;
// num_local_experts for n_routed_experts. The family (Mamba2, relu² MLP/MoE and attention blocks in the engine's
// decoder) builds on this; what it does not run yet is refused by name here.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/io/config_reader.h"
#include "moetune/model/mamba2_mixer.h"

namespace moetune::model {

enum class NemotronHLayer { Mamba2, Attention, Mlp, Moe };

struct NemotronHConfig {
  int64_t vocab_size = 0, hidden_size = 0;
  bool tie_word_embeddings = false;  // read, but transformers 5.17 never ties this family (nemotron_h_tensors)
  double norm_eps = 1e-5;
  std::vector<NemotronHLayer> layers;
  Mamba2Spec mamba;
  int64_t chunk_size = 128;  // the GPU's chunked scan; the CPU recurrence does not need it
  // Attention: no RoPE and no biases (transformers' NemotronHAttention ignores attention_bias).
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;  // the relu² MLP layers
  bool mlp_bias = false;          // MLP, shared expert and latent projections
  // MoE: DeepSeek-V3's sigmoid group-limited router; routed and shared experts are relu² MLPs.
  int64_t num_experts = 0, top_k = 0, moe_intermediate_size = 0, shared_intermediate_size = 0;
  int64_t num_groups = 1, topk_groups = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::optional<int64_t> moe_latent_size;  // fc1_latent_proj / fc2_latent_proj around the routed experts
  int64_t num_nextn_predict_layers = 0;    // MTP layers: not built, not trained (mtp.* in the files is skipped)
};

NemotronHConfig read_nemotron_h_config(const io::ConfigReader& config);

// Every tensor transformers gives NemotronHForCausalLM, in its order, with the names the published checkpoints use
// (backbone.*, per-expert experts.E.up_proj.weight; transformers 5.17 renames backbone. to model. and stacks the
// experts on load). The MoE's e_score_correction_bias is a buffer: listed, flagged, not a parameter.
struct NemotronHTensor {
  std::string name;
  Shape shape;
  bool buffer = false;
};
std::vector<NemotronHTensor> nemotron_h_tensors(const NemotronHConfig& config);

// transformers' num_parameters(): the tensors above less the buffers.
int64_t nemotron_h_parameter_count(const NemotronHConfig& config);

}  // namespace moetune::model
