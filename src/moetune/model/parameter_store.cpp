#include "moetune/model/parameter_store.h"

#include <cstring>

namespace moetune::model {

ParameterStore::ParameterStore(model::ModelWeights weights) : weights_(std::move(weights)) {
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    const Tensor& value = weights_.parameters[i];
    grads_.push_back(Tensor::zeros(value.shape(), value.dtype(), value.device()));
    index_[weights_.layout.parameters[i].name] = i;
  }
}

Param ParameterStore::find(const std::string& name) const {
  auto found = index_.find(name);
  return found == index_.end() ? Param{} : Param{weights_.parameters[found->second], grads_[found->second]};
}

Param ParameterStore::get(const std::string& name) const {
  Param param = find(name);
  if (!param.defined()) fail("no parameter '{}' in this {} model", name, weights_.spec().architecture);
  return param;
}

void ParameterStore::zero_grad() {
  for (Tensor& grad : grads_) zero_bytes(grad.raw_data(), grad.device(), grad.nbytes());
}

}  // namespace moetune::model
