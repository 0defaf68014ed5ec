// The model's parameters with a gradient beside each trainable one, looked up by engine name
// ("layers.0.attn.qkv"). Gradients live in flat runs laid out as the parameters' (model/placed_buffers.h; a
// frozen parameter has none), zeroed in one call per run.
#pragma once

#include <map>
#include <string>

#include "moetune/core/flat_buffers.h"
#include "moetune/model/checkpoint.h"

namespace moetune::model {

struct Param {
  Tensor value, grad;  // both undefined for an optional parameter the model does not have (a bias); grad
                       // undefined for a frozen one
  bool defined() const { return value.defined(); }
};

class ParameterStore {
 public:
  explicit ParameterStore(model::ModelWeights weights);  // gradients start at zero, same dtype and device

  Param get(const std::string& name) const;   // fails naming the parameter when absent
  Param find(const std::string& name) const;  // undefined Param when absent
  void zero_grad();

  const model::ModelWeights& weights() const { return weights_; }
  std::vector<Tensor>& values() { return weights_.parameters; }
  // Parallel to values(); undefined for frozen parameters.
  std::vector<Tensor>& grads() { return grad_storage_.views; }
  const std::vector<Tensor>& grads() const { return grad_storage_.views; }
  // The flat runs (one per dtype) of the replicated parameters' and the expert parameters' gradients.
  const std::vector<Tensor>& replicated_grad_runs() const { return grad_storage_.replicated.buffers; }
  const std::vector<Tensor>& expert_grad_runs() const { return grad_storage_.experts.buffers; }

 private:
  model::ModelWeights weights_;
  PlacedBuffers grad_storage_;
  std::map<std::string, size_t> index_;
};

}  // namespace moetune::model
