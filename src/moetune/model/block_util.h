// Small helpers the decoder blocks share.
#pragma once

#include <initializer_list>

#include "moetune/core/tensor.h"

namespace moetune::model {

// a + b as a new tensor (the residual connection; the inputs stay untouched for the stash).
inline Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = a.clone();
  float* o = out.data<float>();
  const float* other = b.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] += other[i];
  return out;
}

// into += other, elementwise (a gradient accumulated, as loss.backward() does).
inline void accumulate(const Tensor& into, const Tensor& other) {
  float* o = into.data<float>();
  const float* d = other.data<float>();
  for (int64_t i = 0; i < into.numel(); ++i) o[i] += d[i];
}

// Bytes held by the defined tensors among `tensors`: what a stash costs.
inline size_t held_bytes(std::initializer_list<const Tensor*> tensors) {
  size_t total = 0;
  for (const Tensor* t : tensors) total += t->defined() ? t->nbytes() : 0;
  return total;
}

}  // namespace moetune::model
