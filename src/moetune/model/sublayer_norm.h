// The norms a sublayer may place around its mixer (SublayerSpec::norm, ::out_norm) on the CPU: the input norm,
// absent in OLMo-2 (the mixer reads h itself), and the output norm OLMo-2 adds before the residual:
// h + out_norm(mixer(in_norm(h))). The attention and dense MLP blocks use these; model/cuda/sublayer_norm.h is the
// GPU's twin.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model {

// rms_norm(h), or h itself without an input norm (`norm` undefined). weight_offset: SublayerSpec's (Gemma).
Tensor input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset = 0.0f);
// d(h) through the input norm (dnormed itself without one), plus the residual's d(out).
Tensor input_norm_backward(const Tensor& dnormed, const Tensor& h, const Param& norm, double eps, const Tensor& dout,
                           float weight_offset = 0.0f);

class OutputNorm {
 public:
  OutputNorm() = default;
  OutputNorm(Param norm, double eps, float weight_offset = 0.0f, double residual_scale = 1.0)
      : norm_(std::move(norm)), eps_(eps), weight_offset_(weight_offset), residual_scale_(residual_scale) {}
  // Whether the sublayer's output passes through here before the residual add (a norm, or a scale other than 1).
  bool defined() const { return norm_.defined() || residual_scale_ != 1.0; }
  // h + s · out_norm(mixed), keeping `mixed` for the backward pass; h + s · mixed without an output norm.
  Tensor forward(const Tensor& mixed, const Tensor& h);
  // d(mixed) from d(out): s · d(out) through the norm (its weight's gradient accumulated), or s · d(out) itself.
  Tensor backward(const Tensor& dout) const;
  size_t stash_bytes() const { return mixed_.defined() ? mixed_.nbytes() : 0; }
  void clear_stash() { mixed_ = Tensor(); }

 private:
  Param norm_;
  double eps_ = 0;
  float weight_offset_ = 0.0f;
  double residual_scale_ = 1.0;  // SublayerSpec::residual_scale
  Tensor mixed_;  // the mixer's output, the norm's input
};

}  // namespace moetune::model
