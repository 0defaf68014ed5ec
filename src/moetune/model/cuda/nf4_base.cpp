#include "moetune/model/cuda/nf4_base.h"

#include <algorithm>
#include <map>

#include "moetune/core/error.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/gradient_ready_layer.h"
#include "moetune/model/nf4_weights.h"

namespace moetune::model::cuda {

bool Nf4Base::holds(const ParameterSpec& spec) { return quantized_by_qlora(spec); }

void Nf4Base::take(size_t index, const Tensor& host) {
  Held held;
  held.index = index;
  // Uploaded as read (the file's pages, several threads filling pinned buffers: core/staged_upload.h) and coded
  // on the GPU, which gives the CPU's bytes; the upload's bf16 copy is the only transient.
  held.q = ops::cuda::nf4_quantize(host.to(Device::cuda()));
  held_.push_back(std::move(held));
}

void Nf4Base::place(ModelWeights& weights) {
  // Each layer's weights side by side from the scratch's start; the scratch is the largest layer's.
  std::map<int64_t, int64_t> used;
  for (Held& held : held_) {
    const ParameterSpec& spec = weights.layout.parameters[held.index];
    held.layer = gradient_ready_layer(spec.name, weights.spec().num_layers());
    // The hooks dequantize per decoder layer; a projection outside them would need its own moment.
    if (held.layer < 0 || held.layer >= weights.spec().num_layers())
      fail("lora.quantize nf4: '{}' is outside the decoder layers, where the GPU engine does not dequantize NF4 yet; "
           "set lora.quantize none or train on the CPU (training.device cpu)",
           spec.name);
    if (spec.trainable)
      fail("lora.quantize nf4: '{}' is trainable (lora.modules_to_save?) but QLoRA holds it in NF4 on the GPU; "
           "leave it out of modules_to_save, or set lora.quantize none",
           spec.name);
    int64_t& end = used[held.layer];
    held.offset = end;
    end += (shape_numel(spec.shape) + 7) / 8 * 8;  // 16-byte aligned views for the GEMMs
  }
  int64_t largest = 0;
  for (const auto& [layer, elements] : used) largest = std::max(largest, elements);
  if (largest == 0) return;
  scratch_ = Tensor::empty({largest}, DType::BF16, Device::cuda());
  for (Held& held : held_) {
    held.view = scratch_.flat_slice(held.offset, weights.layout.parameters[held.index].shape);
    weights.parameters[held.index] = held.view;
  }
}

void Nf4Base::dequantize_layer(int64_t layer) {
  if (layer == resident_) return;
  const PhaseScope phase("nf4.dequantize");
  bool any = false;
  for (const Held& held : held_)
    if (held.layer == layer) {
      ops::cuda::nf4_dequantize(held.q, held.view);
      any = true;
    }
  if (any) resident_ = layer;
}

size_t Nf4Base::nf4_bytes() const {
  size_t total = 0;
  for (const Held& held : held_) total += held.q.bytes();
  return total;
}

}  // namespace moetune::model::cuda
