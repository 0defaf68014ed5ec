// The model's parameters with a gradient beside each, looked up by engine name ("layers.0.attn.qkv").
#pragma once

#include <map>
#include <string>

#include "moetune/model/checkpoint.h"

namespace moetune::model {

struct Param {
  Tensor value, grad;  // both undefined for an optional parameter the model does not have (a bias)
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
  std::vector<Tensor>& grads() { return grads_; }
  const std::vector<Tensor>& grads() const { return grads_; }

 private:
  model::ModelWeights weights_;
  std::vector<Tensor> grads_;
  std::map<std::string, size_t> index_;
};

}  // namespace moetune::model
