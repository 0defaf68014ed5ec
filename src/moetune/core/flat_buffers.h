// Many tensors in one allocation per dtype: each tensor is a view at an aligned offset of its dtype's buffer.
// Parameters, gradients and optimizer state live this way, so a whole set is zeroed, copied, sharded (ZeRO) or
// left out (a frozen parameter has no gradient and no optimizer state) as one run of memory, and the memory
// plan is exactly the sum of the views.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune {

struct FlatRequest {
  Shape shape;
  DType dtype = DType::F32;
  bool wanted = true;  // false: no view (a frozen parameter's gradient, say)
};

struct FlatBuffers {
  std::vector<Tensor> buffers;  // one per dtype, in order of first request
  std::vector<Tensor> views;    // parallel to the requests; undefined where not wanted
  void zero() const;            // one memset per buffer
};

// Views start at multiples of kFlatAlignmentBytes, what vectorised kernels and tensor-core GEMMs need.
inline constexpr size_t kFlatAlignmentBytes = 256;

// `shards`: each buffer's length is a multiple of `shards` aligned runs, so it splits into that many equal,
// aligned shards (ZeRO: each rank updates one); the tail past the last view is zero-filled padding.
FlatBuffers allocate_flat(const std::vector<FlatRequest>& requests, Device device, bool zeroed, int64_t shards = 1);

}  // namespace moetune
