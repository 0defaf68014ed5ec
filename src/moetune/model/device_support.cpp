#include "moetune/model/device_support.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moetune/core/error.h"
#include "moetune/model/moe_variant.h"
#include "moetune/ops/router_limits.h"

namespace moetune::model {
namespace {

void note(std::vector<std::string>& missing, std::string feature) {
  if (std::find(missing.begin(), missing.end(), feature) == missing.end()) missing.push_back(std::move(feature));
}

}  // namespace

std::vector<std::string> features_missing_on_gpu(const ModelSpec& spec) {
  std::vector<std::string> missing;
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) {
      if (const MoeSpec* m = sublayer.moe()) {
        if (m->router.score == RouterScore::Sigmoid
                ? !is_sigmoid_group_limited(m->router)
                : !m->router.is_softmax_then_grouped_topk() && !m->router.is_topk_then_softmax())
          note(missing, "this router");
        if (m->router.num_experts > ops::kRouterMaxExperts)  // the one-warp-per-token kernels (Kimi-K2 has 384)
          note(missing, fmt::format("routers over more than {} experts", ops::kRouterMaxExperts));
        if (m->router.top_k > ops::kRouterMaxTopK)
          note(missing, fmt::format("routers choosing more than {} experts a token (num_experts_per_tok {})",
                                    ops::kRouterMaxTopK, m->router.top_k));
        if (m->router.num_groups > ops::kRouterMaxGroups)
          note(missing,
               fmt::format("more than {} expert groups (n_group {})", ops::kRouterMaxGroups, m->router.num_groups));
      }
    }
  return missing;
}

std::vector<std::string> features_missing_for_gpu_generation(const ModelSpec& spec) {
  // Sinks, sliding windows, YaRN's scaling and latent attention run in the cached attention as in the forward
  // pass, Mamba2 mixers from their cached conv window and SSM state: generation lacks nothing training has.
  return features_missing_on_gpu(spec);
}

void require_gpu_generation_support(const ModelSpec& spec) {
  const std::vector<std::string> missing = features_missing_for_gpu_generation(spec);
  if (!missing.empty())
    fail("{}: GPU generation does not implement {} yet; generate on the CPU (--device cpu)", spec.architecture,
         fmt::join(missing, ", "));
}

void require_gpu_support(const ModelSpec& spec) {
  const std::vector<std::string> missing = features_missing_on_gpu(spec);
  if (!missing.empty())
    fail("{}: the GPU engine does not implement {} yet; train this model on the CPU (training.device cpu, or "
         "--device cpu)",
         spec.architecture, fmt::join(missing, ", "));
}

}  // namespace moetune::model
