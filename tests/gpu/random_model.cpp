#include "random_model.h"

#include <fstream>

#include "moetune/model/checkpoint.h"
#include "moetune/model/model_description.h"
#include "moetune/model/parameter_layout.h"
#include "test_util.h"

namespace moetune::testing {

std::filesystem::path write_random_model(const std::filesystem::path& folder, const nlohmann::json& config,
                                         std::mt19937& rng) {
  std::filesystem::create_directories(folder);
  write_file(folder / "config.json", config.dump());
  model::ModelWeights weights;
  weights.layout = model::parameter_layout(model::load_model_spec(folder / "config.json"));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const model::ParameterSpec& p : weights.layout.parameters) {
    Tensor t = Tensor::empty(p.shape, DType::F32);
    float* data = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float z = normal(rng);
      data[i] = p.role == model::ParameterRole::Norm     ? 1.0f + 0.1f * z
                : p.role == model::ParameterRole::Buffer ? 0.0f
                                                         : 0.1f * z;
    }
    weights.parameters.push_back(t);
    weights.disk_dtypes.push_back(DType::BF16);
    weights.stored_fused.push_back(false);
  }
  model::save_checkpoint(weights, folder);
  return folder;
}

std::filesystem::path write_wide_mla_model(const std::filesystem::path& folder, std::mt19937& rng) {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(fixture("deepseek_v3_tiny") / "config.json"));
  config["num_attention_heads"] = 2;
  config["num_key_value_heads"] = 2;
  config["qk_nope_head_dim"] = 16;
  config["qk_rope_head_dim"] = 8;
  config["qk_head_dim"] = 24;
  config["v_head_dim"] = 16;
  config["head_dim"] = 8;
  config["hidden_size"] = 32;
  config["kv_lora_rank"] = 16;  // kv_a's output rows (latent + rope) a multiple of 8: the rope key read in place
  config["first_k_dense_replace"] = config["num_hidden_layers"];
  return write_random_model(folder, config, rng);
}

}  // namespace moetune::testing
