#include "moetune/model/parameter_store.h"

#include <cstring>

namespace moetune::model {

ParameterStore::ParameterStore(io::ModelWeights weights) : weights_(std::move(weights)) {
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    MOETUNE_CHECK(weights_.parameters[i].dtype() == DType::F32 && weights_.parameters[i].device().is_cpu(),
                  "the CPU engine trains fp32 parameters; '{}' is {}", weights_.layout.parameters[i].name,
                  weights_.parameters[i].str());
    grads_.push_back(Tensor::zeros(weights_.parameters[i].shape(), DType::F32));
    index_[weights_.layout.parameters[i].name] = i;
  }
}

Param ParameterStore::find(const std::string& name) const {
  auto found = index_.find(name);
  return found == index_.end() ? Param{} : Param{weights_.parameters[found->second], grads_[found->second]};
}

Param ParameterStore::get(const std::string& name) const {
  Param param = find(name);
  if (!param.defined()) fail("no parameter '{}' in this {} model", name, weights_.config().architecture);
  return param;
}

void ParameterStore::zero_grad() {
  for (Tensor& grad : grads_) std::memset(grad.raw_data(), 0, grad.nbytes());
}

}  // namespace moetune::model
