// The memory plan is summed from what each block declares it keeps (model::gpu_stash_bytes); here the GPU blocks'
// own stashes, measured after a real forward pass, must equal those declarations for every family.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "stash_plan_check.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/memory_plan.h"
#include "test_util.h"

namespace moetune {
namespace {

class MemoryPlanGpu : public testing::GpuTest {};

TEST_F(MemoryPlanGpu, BlockStashesAreWhatThePlanDeclares) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_f32", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny",
                           "nemotron_h_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied", "qwen3_next_tiny"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const model::ModelSpec& spec = model.spec();
    const int64_t rows = 2, seq = 24;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % spec.vocab_size);
    const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
    model.forward_backward({.input_ids = input_ids, .labels = input_ids});
    testing::expect_stashes_as_planned(model, rows * seq);
  }
}

}  // namespace
}  // namespace moetune
