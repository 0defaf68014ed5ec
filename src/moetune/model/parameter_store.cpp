#include "moetune/model/parameter_store.h"


namespace moetune::model {

ParameterStore::ParameterStore(model::ModelWeights weights) : weights_(std::move(weights)) {
  std::vector<FlatRequest> requests;
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    const Tensor& value = weights_.parameters[i];
    requests.push_back({value.shape(), value.dtype(), weights_.layout.parameters[i].trainable});
    index_[weights_.layout.parameters[i].name] = i;
  }
  const Device device = weights_.parameters.empty() ? Device::cpu() : weights_.parameters[0].device();
  // Laid out as the parameters are (same requests, same runs), so a ZeRO shard of a gradient run is the
  // gradient of the same shard of the parameter run.
  grad_storage_ = allocate_by_placement(weights_.layout, requests, device, /*zeroed=*/true, weights_.shards);
}

Param ParameterStore::find(const std::string& name) const {
  auto found = index_.find(name);
  return found == index_.end() ? Param{} : Param{weights_.parameters[found->second], grad_storage_.views[found->second]};
}

Param ParameterStore::get(const std::string& name) const {
  Param param = find(name);
  if (!param.defined()) fail("no parameter '{}' in this {} model", name, weights_.spec().architecture);
  return param;
}

void ParameterStore::zero_grad() {
  grad_storage_.replicated.zero();
  grad_storage_.experts.zero();
}

}  // namespace moetune::model
