// Which MLA q/k/v kernels a shape can take (host side, shared by mla_qkv.cu and mla_qkv_in_place.cu).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "moetune/ops/cuda/mla_qkv_kernels.h"

namespace moetune::ops::cuda::mla_paths {

// Elements per 16-byte access of the vectorised kernels.
inline constexpr int kVec = 8;

inline bool valid(const MlaQkvShape& s) {
  return s.tokens >= 0 && s.tokens <= INT32_MAX && s.heads > 0 && s.nope >= 0 && s.rope > 0 && s.rope % 2 == 0 &&
         s.v_dim > 0 && s.qk_width >= s.nope + s.rope && s.v_width >= s.v_dim && s.k_rope_stride >= s.rope;
}

// Whether the 16-byte kernels can run: every width and column boundary a multiple of 8, every tensor aligned.
inline bool vector_path(const MlaQkvShape& s, std::initializer_list<const void*> tensors) {
  for (const int64_t width : {int64_t(s.nope), int64_t(s.rope), int64_t(s.v_dim), int64_t(s.qk_width),
                              int64_t(s.v_width), s.k_rope_stride})
    if (width % kVec != 0) return false;
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace moetune::ops::cuda::mla_paths
