#include "moetune/core/flat_buffers.h"

#include <algorithm>

namespace moetune {

FlatBuffers allocate_flat(const std::vector<FlatRequest>& requests, Device device, bool zeroed, int64_t shards) {
  std::vector<DType> dtypes;
  std::vector<int64_t> elements, offsets(requests.size(), 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].wanted) continue;
    auto found = std::find(dtypes.begin(), dtypes.end(), requests[i].dtype);
    const size_t d = size_t(found - dtypes.begin());
    if (found == dtypes.end()) {
      dtypes.push_back(requests[i].dtype);
      elements.push_back(0);
    }
    const int64_t align = int64_t(kFlatAlignmentBytes / dtype_size(requests[i].dtype));
    offsets[i] = (elements[d] + align - 1) / align * align;
    elements[d] = offsets[i] + shape_numel(requests[i].shape);
  }
  FlatBuffers flat;
  for (size_t d = 0; d < dtypes.size(); ++d) {
    const int64_t granule = shards * int64_t(kFlatAlignmentBytes / dtype_size(dtypes[d]));
    const int64_t length = (elements[d] + granule - 1) / granule * granule;
    // Sharded buffers are updated whole, gaps and tail included, so those must hold zeros, not garbage.
    const bool zero = zeroed || shards > 1;
    flat.buffers.push_back(zero ? Tensor::zeros({length}, dtypes[d], device) : Tensor::empty({length}, dtypes[d], device));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].wanted) {
      flat.views.emplace_back();
      continue;
    }
    const size_t d = size_t(std::find(dtypes.begin(), dtypes.end(), requests[i].dtype) - dtypes.begin());
    flat.views.push_back(flat.buffers[d].flat_slice(offsets[i], requests[i].shape));
  }
  return flat;
}

void FlatBuffers::zero() const {
  for (const Tensor& buffer : buffers) zero_bytes(buffer.raw_data(), buffer.device(), buffer.nbytes());
}

}  // namespace moetune
