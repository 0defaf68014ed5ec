// Checks, after a forward and backward pass, that each GPU block kept what the memory plan declares for it
// (model::gpu_stash_bytes), in the order of the model's sublayers. Shared by MemoryPlanGpu and MlaVInKvGpu.
#pragma once

#include <gtest/gtest.h>

#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/memory_plan.h"

namespace moetune::testing {

inline void expect_stashes_as_planned(const model::cuda::CausalLM& model, int64_t tokens) {
  const model::ModelSpec& spec = model.spec();
  const auto& report = model.stash_report();
  size_t i = 0;
  for (const model::LayerSpec& layer : spec.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers) {
      ASSERT_LT(i, report.size());
      EXPECT_EQ(int64_t(report[i].second),
                model::gpu_stash_bytes(sublayer, spec.hidden_size, tokens, /*keep_outputs=*/true))
          << report[i].first;
      ++i;
    }
  EXPECT_EQ(i, report.size());
}

}  // namespace moetune::testing
