#include "moetune/model/router_bias_balance.h"

#include <numeric>

#include "moetune/core/error.h"

namespace moetune::model {

void add_expert_load(const ops::Routing& routing, const std::vector<uint8_t>& token_valid, std::vector<double>& load) {
  const int64_t tokens = routing.logits.size(0), experts = routing.logits.size(1), k = routing.top_k;
  if (load.empty()) load.assign(size_t(experts), 0.0);
  MOETUNE_CHECK(int64_t(load.size()) == experts, "expert load of {} experts for a router of {}", load.size(), experts);
  for (int64_t t = 0; t < tokens; ++t) {
    if (!token_valid.empty() && !token_valid[size_t(t)]) continue;
    for (int64_t j = 0; j < k; ++j) load[size_t(routing.expert[size_t(t * k + j)])] += 1;
  }
}

void balance_correction_bias(const Tensor& bias, const std::vector<double>& load, double rate) {
  MOETUNE_CHECK(bias.dtype() == DType::F32 && bias.numel() == int64_t(load.size()),
                "correction bias {} for the load of {} experts", bias.str(), load.size());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / double(load.size());
  float* b = bias.data<float>();
  for (size_t e = 0; e < load.size(); ++e)
    b[e] += float(load[e] < mean ? rate : load[e] > mean ? -rate : 0.0);
}

}  // namespace moetune::model
