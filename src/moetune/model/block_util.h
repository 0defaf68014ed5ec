// Small helpers the decoder blocks share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

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

// a · scale as a new tensor (Granite's residual_multiplier), the factor as the fp32 number transformers multiplies by.
inline Tensor scaled(const Tensor& a, double scale) {
  Tensor out = a.clone();
  float* o = out.data<float>();
  const float factor = float(scale);
  for (int64_t i = 0; i < out.numel(); ++i) o[i] *= factor;
  return out;
}

// Columns [first, first + count) of a [rows, width] tensor, as a new [rows, count] tensor (a split along the
// last dimension: view [T, heads, d] as [T·heads, d] to split per head).
inline Tensor columns(const Tensor& x, int64_t first, int64_t count) {
  const int64_t rows = x.size(0), width = x.size(1);
  Tensor out = Tensor::empty({rows, count}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x.data<float>() + r * width + first, count, out.data<float>() + r * count);
  return out;
}

// [a; b] along the first dimension (rows, tokens), F32; an undefined `a` counts as no rows.
inline Tensor concatenate_rows(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b.clone();
  Shape shape = a.shape();
  shape[0] += b.size(0);
  Tensor out = Tensor::empty(shape, DType::F32);
  std::copy_n(a.data<float>(), a.numel(), out.data<float>());
  std::copy_n(b.data<float>(), b.numel(), out.data<float>() + a.numel());
  return out;
}

// Writes `part` [rows, count] into columns [first, first + count) of `x` [rows, width].
inline void set_columns(const Tensor& x, int64_t first, const Tensor& part) {
  const int64_t rows = x.size(0), width = x.size(1), count = part.numel() / rows;
  for (int64_t r = 0; r < rows; ++r) std::copy_n(part.data<float>() + r * count, count, x.data<float>() + r * width + first);
}

// into += other, elementwise (a gradient accumulated, as loss.backward() does).
inline void accumulate(const Tensor& into, const Tensor& other) {
  float* o = into.data<float>();
  const float* d = other.data<float>();
  for (int64_t i = 0; i < into.numel(); ++i) o[i] += d[i];
}

// The rows of `x` [N, width] where `valid` is 0 (padding) set to zero, in place; empty `valid`: none.
inline void zero_padding(const Tensor& x, const std::vector<uint8_t>& valid) {
  if (valid.empty()) return;
  const int64_t width = x.size(1);
  for (size_t n = 0; n < valid.size(); ++n)
    if (!valid[n]) std::fill_n(x.data<float>() + int64_t(n) * width, width, 0.0f);
}

// `x` with its padding rows zeroed, as a new tensor (x itself without padding).
inline Tensor masked(const Tensor& x, const std::vector<uint8_t>& valid) {
  if (valid.empty()) return x;
  Tensor out = x.clone();
  zero_padding(out, valid);
  return out;
}

// Bytes held by the defined tensors among `tensors`: what a stash costs.
inline size_t held_bytes(std::initializer_list<const Tensor*> tensors) {
  size_t total = 0;
  for (const Tensor* t : tensors) total += t->defined() ? t->nbytes() : 0;
  return total;
}

}  // namespace moetune::model
