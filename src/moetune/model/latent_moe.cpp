#include "moetune/model/latent_moe.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/relu_squared.h"

namespace moetune::model {
namespace {

// down(relu²(up x)), the shared expert and each routed expert.
Tensor relu2_mlp_forward(const Tensor& x, const Tensor& up, const Tensor& up_bias, const Tensor& down,
                         const Tensor& down_bias) {
  return ops::linear_forward(ops::relu_squared_forward(ops::linear_forward(x, up, up_bias)), down, down_bias);
}

// Its backward; accumulates the weights' gradients (undefined: frozen) and returns dx.
Tensor relu2_mlp_backward(const Tensor& dy, const Tensor& x, const Tensor& up, const Tensor& up_bias, const Tensor& down,
                          const Tensor& dup, const Tensor& dup_bias, const Tensor& ddown, const Tensor& ddown_bias) {
  const Tensor hidden = ops::linear_forward(x, up, up_bias);
  const Tensor dact = ops::linear_backward(dy, ops::relu_squared_forward(hidden), down, ddown, ddown_bias);
  return ops::linear_backward(ops::relu_squared_backward(dact, hidden), x, up, dup, dup_bias);
}

Tensor row(const Tensor& x, int64_t t) { return x.narrow(t, 1); }
Tensor expert(const Tensor& stacked, int32_t e) { return stacked.defined() ? stacked[e] : Tensor(); }

}  // namespace

Tensor latent_moe_forward(const LatentMoeSpec& spec, const LatentMoeWeights& w, const Tensor& x, LatentMoeStash* stash) {
  ops::Routing routing =
      ops::sigmoid_router_forward(ops::linear_forward(x, w.router), w.correction_bias, spec.router);
  const Tensor latent = spec.has_latent ? ops::linear_forward(x, w.fc1, w.fc1_bias) : x;
  const int64_t tokens = x.size(0), k = spec.router.top_k;
  Tensor combined = Tensor::zeros(latent.shape(), DType::F32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = routing.expert[size_t(t * k + j)];
      const Tensor out = relu2_mlp_forward(row(latent, t), w.up[e], {}, w.down[e], {});
      const float weight = routing.weight[size_t(t * k + j)];
      float* c = combined.data<float>() + t * latent.size(1);
      for (int64_t i = 0; i < out.numel(); ++i) c[i] += weight * out.data<float>()[i];
    }
  const Tensor routed = spec.has_latent ? ops::linear_forward(combined, w.fc2, w.fc2_bias) : combined;
  Tensor out = add(routed, relu2_mlp_forward(x, w.shared_up, w.shared_up_bias, w.shared_down, w.shared_down_bias));
  if (stash) *stash = {x, latent, combined, std::move(routing)};
  return out;
}

Tensor latent_moe_backward(const LatentMoeSpec& spec, const LatentMoeWeights& w, const Tensor& dy,
                           const LatentMoeStash& stash, const LatentMoeWeights& g) {
  Tensor dx = relu2_mlp_backward(dy, stash.input, w.shared_up, w.shared_up_bias, w.shared_down, g.shared_up,
                                 g.shared_up_bias, g.shared_down, g.shared_down_bias);
  const Tensor dcombined =
      spec.has_latent ? ops::linear_backward(dy, stash.combined, w.fc2, g.fc2, g.fc2_bias) : dy;
  const int64_t tokens = stash.input.size(0), k = spec.router.top_k, width = stash.latent.size(1);
  Tensor dlatent = Tensor::zeros(stash.latent.shape(), DType::F32);
  std::vector<float> dweight(size_t(tokens * k), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = stash.routing.expert[size_t(t * k + j)];
      const Tensor input = row(stash.latent, t), dout = row(dcombined, t).clone();
      const Tensor out = relu2_mlp_forward(input, w.up[e], {}, w.down[e], {});
      const float weight = stash.routing.weight[size_t(t * k + j)];
      double dot = 0;
      for (int64_t i = 0; i < width; ++i) {
        dot += double(dout.data<float>()[i]) * out.data<float>()[i];
        dout.data<float>()[i] *= weight;
      }
      dweight[size_t(t * k + j)] = float(dot);
      const Tensor din = relu2_mlp_backward(dout, input, w.up[e], {}, w.down[e], expert(g.up, e), {},
                                            expert(g.down, e), {});
      accumulate(row(dlatent, t), din);
    }
  if (spec.has_latent) accumulate(dx, ops::linear_backward(dlatent, stash.input, w.fc1, g.fc1, g.fc1_bias));
  else accumulate(dx, dlatent);
  const Tensor dlogits = ops::sigmoid_router_backward(stash.routing, dweight, spec.router);
  accumulate(dx, ops::linear_backward(dlogits, stash.input, w.router, g.router));
  return dx;
}

}  // namespace moetune::model
