// The mixture-of-experts half of a Qwen3-MoE layer on the GPU: route rms_norm(h) (fp32 router logits, softmax
// top-k in one kernel), permute to expert-major rows on the device, two grouped GEMMs with SwiGLU between, and
// the weighted combine added to h. Nothing is read back to the host: expert counts stay on the device.
#pragma once

#include "moetune/model/block_params.h"
#include "moetune/ops/cuda/permute.h"

namespace moetune::model::cuda {

// The load-balancing loss's running sums over the MoE layers of one forward pass (device F32 [E] each).
struct AuxLossSums {
  Tensor counts, prob_sums;
};

class MoeBlock {
 public:
  MoeBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config);

  // Adds this layer's counts into `aux` when aux.counts is defined. Per-layer counts are kept for telemetry.
  Tensor forward(const Tensor& h, const Tensor& token_valid, const AuxLossSums& aux);
  // `aux_scale` ≠ 0 adds the aux loss's gradient (counts over all layers in `aux`, `aux_rows` rows) to the
  // router logits' gradient.
  Tensor backward(const Tensor& dout, const Tensor& token_valid, const AuxLossSums& aux, double aux_rows, double aux_scale);
  // This layer's top-k counts per expert from the last forward (F32 [E] on the device).
  const Tensor& layer_counts() const { return layer_counts_; }
  size_t stash_bytes() const;
  void clear_stash();

 private:
  const io::ModelConfig& config_;
  MoeParams p_;
  Tensor input_;             // h
  Tensor logits_;            // F32 [T, E]
  Tensor expert_ids_;        // I32 [T, k]
  Tensor weights_;           // F32 [T, k]
  ops::cuda::DevicePermutation plan_;
  Tensor permuted_;          // [T k, H]
  Tensor gate_up_out_;       // [T k, 2 I]
  Tensor expert_out_;        // [T k, H]
  Tensor layer_counts_, layer_prob_sums_;
};

}  // namespace moetune::model::cuda
