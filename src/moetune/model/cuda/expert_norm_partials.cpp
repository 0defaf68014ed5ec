#include "moetune/model/cuda/expert_norm_partials.h"

#include <utility>

#include "moetune/ops/cuda/grouped_gemm.h"

namespace moetune::model::cuda {

Tensor ExpertNormPartials::claim(const Tensor& grad) {
  if (!armed_ || !grad.defined()) return Tensor();
  const void* key = grad.raw_data();
  auto [at, made] = buffers_.try_emplace(key);
  if (made) at->second = Tensor::empty({ops::cuda::grouped_weight_grad_norm_slots(grad)}, DType::F32, Device::cuda());
  claimed_[key] = at->second;
  return at->second;
}

std::map<const void*, Tensor> ExpertNormPartials::take() { return std::exchange(claimed_, {}); }

}  // namespace moetune::model::cuda
