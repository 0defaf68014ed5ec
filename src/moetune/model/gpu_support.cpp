#include "moetune/model/gpu_support.h"

#include "moetune/core/error.h"

namespace moetune::model {

std::optional<std::string> gpu_missing_feature(const ModelSpec& spec) {
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) {
      if (const AttentionSpec* a = sublayer.attention(); a && a->mla)
        return "multi-head latent attention (MLA: kv_lora_rank, q/k head dim != v head dim)";
      if (const MoeSpec* moe = sublayer.moe(); moe && moe->router.score == RouterScore::Sigmoid)
        return "the sigmoid group-limited router (n_group / topk_group, e_score_correction_bias)";
    }
  return std::nullopt;
}

void require_gpu_support(const ModelSpec& spec) {
  if (const std::optional<std::string> missing = gpu_missing_feature(spec))
    fail("{}: {} is not implemented in the GPU engine yet; the CPU engine trains this model (training.device: cpu)",
         spec.architecture, *missing);
}

}  // namespace moetune::model
