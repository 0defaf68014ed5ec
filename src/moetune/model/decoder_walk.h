// The one walk over the model description that both devices' models are built by: a residual sublayer per
// SublayerSpec, in order, each made of the block its mixer kind maps to on that device. `Blocks` names the
// device's block types (Attention, Mlp, Moe and the MoE's Dispatcher, Mamba2, GatedDelta); the CPU and GPU
// CausalLMs differ only there, so a new mixer kind is added to this walk once.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model {

template <typename Blocks>
struct Sublayer {
  int64_t layer = 0;
  std::string name;  // "layers.0.attention", "layers.0.moe", ...: the stash report's key
  std::unique_ptr<typename Blocks::Attention> attention;
  std::unique_ptr<typename Blocks::Mlp> mlp;
  std::unique_ptr<typename Blocks::Moe> moe;
  std::unique_ptr<typename Blocks::Mamba2> mamba2;
  std::unique_ptr<typename Blocks::GatedDelta> gated_delta;
  // training.recompute (model/recompute.h): the forward pass keeps only the sublayer's input, and the backward
  // pass runs the forward again from it first.
  bool recompute = false;
  Tensor recompute_input;

  // Calls `f` with the one block this sublayer holds.
  template <typename F>
  decltype(auto) with_block(F&& f) const {
    if (attention) return f(*attention);
    if (mlp) return f(*mlp);
    if (mamba2) return f(*mamba2);
    if (gated_delta) return f(*gated_delta);
    return f(*moe);
  }

  // Every block takes the device's StepContext, so one walk serves both devices.
  template <typename Context>
  Tensor forward(const Tensor& h, Context& context) {
    return with_block([&](auto& block) { return block.forward(h, context); });
  }
  template <typename Context>
  Tensor backward(const Tensor& dout, Context& context) {
    return with_block([&](auto& block) { return block.backward(dout, context); });
  }
  size_t stash_bytes() const {
    const size_t kept = recompute_input.defined() ? recompute_input.nbytes() : 0;
    return kept + with_block([](const auto& block) { return block.stash_bytes(); });
  }
  void clear_stash() {
    recompute_input = Tensor();
    with_block([](auto& block) { block.clear_stash(); });
  }
};

// Makes an MoE layer's dispatcher from its expert count: expert parallelism passes its all-to-all dispatcher;
// empty: Blocks::Dispatcher (every expert on this device).
template <typename Blocks>
using DispatcherFactory = std::function<std::unique_ptr<typename Blocks::DispatcherBase>(int64_t num_experts)>;

template <typename Blocks>
std::vector<Sublayer<Blocks>> build_sublayers(const ModelSpec& spec, const ParameterStore& store,
                                              const DispatcherFactory<Blocks>& make_dispatcher = {}) {
  std::vector<Sublayer<Blocks>> sublayers;
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer) {
    const std::string prefix = fmt::format("layers.{}.", layer);
    for (const SublayerSpec& sublayer : spec.layers[size_t(layer)].sublayers) {
      Sublayer<Blocks>& b = sublayers.emplace_back();
      b.layer = layer;
      b.name = prefix + block_kind(sublayer);
      if (sublayer.attention())
        b.attention = std::make_unique<typename Blocks::Attention>(store, prefix, sublayer, spec.norm_eps);
      else if (sublayer.mlp())
        b.mlp = std::make_unique<typename Blocks::Mlp>(store, prefix, sublayer, spec.norm_eps);
      else if (sublayer.mamba2())
        b.mamba2 = std::make_unique<typename Blocks::Mamba2>(store, prefix, sublayer, spec.norm_eps);
      else if (sublayer.gated_delta())
        b.gated_delta = std::make_unique<typename Blocks::GatedDelta>(store, prefix, sublayer, spec.norm_eps);
      else {
        const int64_t experts = sublayer.moe()->router.num_experts;
        b.moe = std::make_unique<typename Blocks::Moe>(
            store, prefix, sublayer, spec.norm_eps,
            make_dispatcher ? make_dispatcher(experts) : std::make_unique<typename Blocks::Dispatcher>(experts));
      }
    }
  }
  return sublayers;
}

// The residual stream through every sublayer, and its gradient back through them in reverse; each block drops
// its stash once its backward pass is done.
// Called in the forward pass before a layer's first sublayer runs: its parameters must be in place by then (so
// their all-gather between ranks may still be running until here).
using LayerStarting = std::function<void(int64_t layer)>;

template <typename Blocks, typename Context>
Tensor walk_forward(std::vector<Sublayer<Blocks>>& sublayers, Tensor h, Context& context,
                    const LayerStarting& layer_starting = {}) {
  for (size_t i = 0; i < sublayers.size(); ++i) {
    if (layer_starting && (i == 0 || sublayers[i - 1].layer != sublayers[i].layer)) layer_starting(sublayers[i].layer);
    Tensor output = sublayers[i].forward(h, context);
    if (sublayers[i].recompute) {
      sublayers[i].clear_stash();
      sublayers[i].recompute_input = h;
    }
    h = std::move(output);
  }
  return h;
}

// Called in the backward pass when a layer's gradients are final: with L, every parameter of layers >= L has
// its gradient for this micro-batch (so its reduction between ranks may start).
using LayerGradientsDone = std::function<void(int64_t layer)>;

// `layer_starting`: called before a layer's backward pass (and its recomputation) begins, as in the forward walk:
// QLoRA dequantizes the layer's frozen weights there (model/cuda/nf4_base.h).
template <typename Blocks, typename Context>
Tensor walk_backward(std::vector<Sublayer<Blocks>>& sublayers, Tensor dh, Context& context,
                     const LayerGradientsDone& layer_done = {}, const LayerStarting& layer_starting = {}) {
  for (auto sublayer = sublayers.rbegin(); sublayer != sublayers.rend(); ++sublayer) {
    if (layer_starting && (sublayer == sublayers.rbegin() || std::prev(sublayer)->layer != sublayer->layer))
      layer_starting(sublayer->layer);
    if (sublayer->recompute) {
      // The same forward again (same input, weights and routing), minus its side effects on the step: the
      // context's recomputing() copy leaves the aux loss's sums alone, which the first pass already counted.
      const PhaseScope phase("recompute");
      const Tensor input = std::move(sublayer->recompute_input);
      auto again = context.recomputing();
      sublayer->forward(input, again);
    }
    dh = sublayer->backward(dh, context);
    sublayer->clear_stash();
    const auto next = std::next(sublayer);
    if (layer_done && (next == sublayers.rend() || next->layer != sublayer->layer)) layer_done(sublayer->layer);
  }
  return dh;
}

}  // namespace moetune::model
