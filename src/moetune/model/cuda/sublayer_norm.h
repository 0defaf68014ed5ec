// The norms a sublayer may place around its mixer on the GPU (the CPU's twin, with what they mean:
// model/sublayer_norm.h): the input norm, absent in OLMo-2, and OLMo-2's output norm before the residual add.
// Without an output norm the blocks keep their residual fused into their last GEMM; with one (or with Granite's
// residual scale), that GEMM writes the mixer's output alone and OutputNorm adds the residual after it.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model::cuda {

// rms_norm(h) in a new tensor, or h itself without an input norm (`norm` undefined). weight_offset: SublayerSpec's
// norm_weight_offset (Gemma's 1 + weight norms).
Tensor input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset = 0.0f);
// input_norm_forward with the rows whose `valid` flag is 0 zeroed (U8 [T] on the GPU; undefined: none): the
// recurrent mixers' input (Mamba2, the Gated DeltaNet), whose conv and state must see zeros at padding.
Tensor masked_input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset,
                                 const Tensor& valid);
// The backward pass's copy: `kept` (the forward's, where the step keeps norm outputs), the norm run again, or h.
Tensor input_norm_for_backward(const Tensor& kept, const Tensor& h, const Param& norm, double eps,
                               float weight_offset = 0.0f);
// dh = dout + d(h) through the input norm (dnormed itself without one); dh may be dnormed.
void input_norm_backward(const Tensor& dnormed, const Tensor& h, const Param& norm, double eps, const Tensor& dh,
                         const Tensor& dout, float weight_offset = 0.0f);

class OutputNorm {
 public:
  OutputNorm() = default;
  OutputNorm(Param norm, double eps, float weight_offset = 0.0f, double residual_scale = 1.0)
      : norm_(std::move(norm)), eps_(eps), weight_offset_(weight_offset), residual_scale_(float(residual_scale)) {}
  // Whether the sublayer's output passes through here before the residual add (a norm, or a scale other than 1).
  bool defined() const { return norm_.defined() || residual_scale_ != 1.0f; }
  // out = h + s · out_norm(mixed) (h + s · mixed without a norm); `keep` holds mixed for the backward pass (not in
  // generation). out may be mixed itself.
  void forward(const Tensor& mixed, const Tensor& h, const Tensor& out, bool keep = true);
  // d(mixed) from d(out): s · d(out) through the norm (its weight's gradient accumulated); d(out) itself where
  // nothing is defined.
  Tensor backward(const Tensor& dout) const;
  size_t stash_bytes() const { return mixed_.defined() ? mixed_.nbytes() : 0; }
  void clear_stash() { mixed_ = Tensor(); }

 private:
  Param norm_;
  double eps_ = 0;
  float weight_offset_ = 0.0f;
  float residual_scale_ = 1.0f;  // SublayerSpec::residual_scale
  Tensor mixed_;  // the mixer's output, the norm's input
};

}  // namespace moetune::model::cuda
