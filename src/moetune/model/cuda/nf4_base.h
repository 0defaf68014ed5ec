// QLoRA's frozen base on the GPU (lora.quantize: nf4): the projection and expert weights that QLoRA quantizes
// (model/nf4_weights.h) are held as NF4 (ops/cuda/nf4.h: block 64, double-quantized absmax, the same bytes as the
// CPU's ops/nf4.h), about 0.52 bytes a weight instead of bf16's 2. Before a layer's blocks run, forward or
// backward (and before a recomputed forward), its weights are dequantized into one reused bf16 scratch that the
// blocks' parameter views point into: the backward of a frozen weight needs only dX = dY·W, so W once more.
// The blocks do not know: they read bf16 weights as always. Cost: each weight's dequantization once per pass that
// reads it (2.5 bytes of traffic a weight), and one layer's bf16 weights of memory.
#pragma once

#include <cstdint>
#include <vector>

#include "moetune/model/checkpoint.h"
#include "moetune/ops/cuda/nf4.h"

namespace moetune::model::cuda {

class Nf4Base {
 public:
  // Which of the loader's parameters this base holds (LoadOptions::held_elsewhere), and the taker of each as the
  // loader reads it (LoadOptions::take): uploaded, quantized on the GPU, the bf16 copies dropped.
  static bool holds(const ParameterSpec& spec);
  void take(size_t index, const Tensor& host);
  // After the load (and LoRA's attach): the scratch, sized for the largest layer, and every held parameter's
  // view in `weights` pointing into it. Fails naming a held weight that is trainable (lora.modules_to_save).
  void place(ModelWeights& weights);
  // Layer L's weights into the scratch (the decoder walks' LayerStarting hooks); nothing for a layer without
  // held weights, nor when the scratch holds L already.
  void dequantize_layer(int64_t layer);

  size_t nf4_bytes() const;
  size_t scratch_bytes() const { return scratch_.defined() ? scratch_.nbytes() : 0; }
  size_t weights_held() const { return held_.size(); }

 private:
  struct Held {
    size_t index = 0;    // in the model's parameters
    int64_t layer = 0;   // gradient_ready_layer's number
    int64_t offset = 0;  // elements into the scratch
    ops::cuda::Nf4DeviceTensor q;
    Tensor view;         // the parameter's value: bf16 in the scratch
  };
  std::vector<Held> held_;
  Tensor scratch_;
  int64_t resident_ = INT64_MIN;  // the layer the scratch holds
};

}  // namespace moetune::model::cuda
