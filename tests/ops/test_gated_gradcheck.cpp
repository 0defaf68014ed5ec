// The gated MLPs' gate functions (ops/activation.h's GateFunction, transformers' hidden_act) on the CPU: each
// backward against finite differences of its forward, and each f at a point against its closed form. A file of its
// own: its draws leave the other gradient checks' seeded inputs as they were.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck_util.h"
#include "moetune/ops/activation.h"

namespace moetune::ops {
namespace {

// The other gate functions of f(gate) ⊙ up (hidden_act): the backward against finite differences of the forward,
// and f itself at a few points against its closed form (ReLU's kink kept away from the nudges).
TEST(GradCheck, GatedByEveryGateFunction) {
  for (const GateFunction gate :
       {GateFunction::Silu, GateFunction::Gelu, GateFunction::GeluTanh, GateFunction::QuickGelu, GateFunction::Relu}) {
    SCOPED_TRACE(gate_function_name(gate));
    Tensor x = random({3, 10}, 2.0f), dy = random({3, 5});
    for (int64_t i = 0; i < x.numel(); ++i)
      if (std::fabs(x.data<float>()[i]) < 0.05f) x.data<float>()[i] += 0.2f;
    Tensor dx = gated_backward(dy, x, gate);
    expect_gradient(
        "dgate_up", x, [&] { return weighted_sum(gated_forward(x, gate), dy); }, dx);
  }
  const Tensor point = Tensor::from_vector<float>({-1.5f, 0.5f, 2.0f, 1.0f, 1.0f, 1.0f}, {1, 6});  // gates | ups of 1
  const auto at = [&](GateFunction gate, int i) { return gated_forward(point, gate).data<float>()[i]; };
  const double g = 0.5;
  EXPECT_NEAR(at(GateFunction::Gelu, 1), g * 0.5 * (1 + std::erf(g / std::sqrt(2.0))), 1e-6);
  EXPECT_NEAR(at(GateFunction::GeluTanh, 1),
              0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))), 1e-6);
  EXPECT_NEAR(at(GateFunction::QuickGelu, 1), g / (1 + std::exp(-1.702 * g)), 1e-6);
  EXPECT_EQ(at(GateFunction::Relu, 0), 0.0f);
  EXPECT_EQ(at(GateFunction::Relu, 2), 2.0f);
  const Tensor silu = gated_forward(point, GateFunction::Silu), swiglu = swiglu_forward(point);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(silu.data<float>()[i], swiglu.data<float>()[i]);
}

}  // namespace
}  // namespace moetune::ops
