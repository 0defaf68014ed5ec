// CausalLM::force_routing, which the GPU parity test uses to make the CPU engine follow the GPU's near-tie flips: a
// model forced to the choices it makes itself computes the same bits as the free one (loss and every gradient), for
// every router route_chosen weighs — softmax (with groups and ERNIE's choice bias), top-k-then-softmax (GPT-OSS,
// Granite) and DeepSeek-V3's sigmoid one.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "moetune/io/safetensors.h"
#include "moetune/model/causal_lm.h"
#include "parity_batch.h"
#include "test_util.h"

namespace moetune::model {
namespace {

bool has_moe(const ModelSpec& spec) {
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers)
      if (sublayer.moe()) return true;
  return false;
}

TEST(ForcedRouting, OwnChoicesGiveTheFreeModelsBits) {
  int checked = 0;
  for (const std::string& name : testing::parity_fixtures()) {
    SCOPED_TRACE(name);
    CausalLM free = CausalLM::from_pretrained(testing::fixture(name));
    if (!has_moe(free.spec())) continue;  // every router the CPU runs can be forced
    const io::SafetensorsFile reference = io::SafetensorsFile::open(testing::fixture(name) / "parity.safetensors");
    const Batch batch = testing::parity_batch(reference, "packed");
    const CausalLMOutput free_out = free.forward(batch);
    std::vector<std::vector<int32_t>> choices;
    for (const ops::Routing& routing : free.routings()) choices.push_back(routing.expert);
    free.backward();

    CausalLM forced = CausalLM::from_pretrained(testing::fixture(name));
    forced.force_routing(choices);
    const CausalLMOutput forced_out = forced.forward(batch);
    forced.backward();
    EXPECT_EQ(forced_out.loss, free_out.loss);
    EXPECT_TRUE(forced_out.logits.same_bytes(free_out.logits));
    const std::vector<Tensor>& a = free.parameters().grads();
    const std::vector<Tensor>& b = forced.parameters().grads();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].defined()) EXPECT_TRUE(a[i].same_bytes(b[i])) << "gradient " << i;
    }
    ++checked;
    std::printf("forced routing: %s\n", name.c_str());
  }
  EXPECT_GE(checked, 25);  // every MoE parity fixture
}

}  // namespace
}  // namespace moetune::model
