// Nemotron-H's MoE (model/latent_moe.h) against transformers 5.17's NemotronHMoE in fp32 (fixture by
// tests/reference/make_latent_moe_fixture.py): output, d(input) and every parameter's gradient at 1e-5, with and
// without the latent projections.
#include <gtest/gtest.h>

#include "moetune/io/safetensors.h"
#include "moetune/model/latent_moe.h"
#include "test_util.h"

namespace moetune::model {
namespace {

struct Named {
  const char* name;
  Tensor LatentMoeWeights::*slot;
};

const Named kWeights[] = {{"gate.weight", &LatentMoeWeights::router},
                          {"experts.up_proj", &LatentMoeWeights::up},
                          {"experts.down_proj", &LatentMoeWeights::down},
                          {"shared_experts.up_proj.weight", &LatentMoeWeights::shared_up},
                          {"shared_experts.up_proj.bias", &LatentMoeWeights::shared_up_bias},
                          {"shared_experts.down_proj.weight", &LatentMoeWeights::shared_down},
                          {"shared_experts.down_proj.bias", &LatentMoeWeights::shared_down_bias},
                          {"fc1_latent_proj.weight", &LatentMoeWeights::fc1},
                          {"fc1_latent_proj.bias", &LatentMoeWeights::fc1_bias},
                          {"fc2_latent_proj.weight", &LatentMoeWeights::fc2},
                          {"fc2_latent_proj.bias", &LatentMoeWeights::fc2_bias}};

void check_case(const std::string& name, bool latent) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(testing::fixture("nemotron_h_moe") / (name + ".safetensors"));
  const LatentMoeSpec spec{{/*top_k=*/3, /*num_groups=*/2, /*topk_groups=*/1, /*renormalize=*/true, 2.5}, latent};
  LatentMoeWeights weights, grads;
  weights.correction_bias = file.tensor("gate.e_score_correction_bias").clone();
  int present = 0;
  for (const Named& w : kWeights) {
    if (!file.contains(w.name)) continue;
    ++present;
    weights.*w.slot = file.tensor(w.name).clone();
    grads.*w.slot = Tensor::zeros((weights.*w.slot).shape(), DType::F32);
  }
  EXPECT_EQ(present, latent ? 11 : 5) << name;
  LatentMoeStash stash;
  const Tensor out = latent_moe_forward(spec, weights, file.tensor("x"), &stash);
  EXPECT_LE(testing::relative_error_f32(out, file.tensor("out")), 1e-5) << name << " out";
  const Tensor dx = latent_moe_backward(spec, weights, file.tensor("g"), stash, grads);
  EXPECT_LE(testing::relative_error_f32(dx, file.tensor("dx")), 1e-5) << name << " dx";
  for (const Named& w : kWeights) {
    if (!file.contains(w.name)) continue;
    EXPECT_LE(testing::relative_error_f32(grads.*w.slot, file.tensor(std::string("grad.") + w.name)), 1e-5)
        << name << " d" << w.name;
  }
}

TEST(NemotronHMoeParity, LatentWithBiases) { check_case("latent", true); }
TEST(NemotronHMoeParity, PlainWithoutLatent) { check_case("plain", false); }

}  // namespace
}  // namespace moetune::model
