#include "moetune/model/nf4_weights.h"

#include "moetune/model/lora_weights.h"
#include "moetune/ops/nf4.h"

namespace moetune::model {

bool quantized_by_qlora(const ParameterSpec& spec) {
  return (spec.role == ParameterRole::Matmul || spec.role == ParameterRole::Experts) && !is_lora_parameter(spec);
}

size_t round_frozen_weights_to_nf4(ModelWeights& weights) {
  size_t bytes = 0;
  for (size_t i = 0; i < weights.parameters.size(); ++i) {
    const ParameterSpec& spec = weights.layout.parameters[i];
    if (!quantized_by_qlora(spec) || spec.trainable) continue;
    const ops::Nf4Tensor q = ops::nf4_quantize(weights.parameters[i]);
    weights.parameters[i].copy_from(ops::nf4_dequantize(q));
    bytes += q.bytes();
  }
  return bytes;
}

}  // namespace moetune::model
