#include "moetune/ops/cuda/nf4.h"

#include <algorithm>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/nf4_kernels.h"

namespace moetune::ops::cuda {
namespace {

Tensor upload_bytes(const std::vector<uint8_t>& bytes) {
  Tensor host = Tensor::empty({int64_t(bytes.size())}, DType::U8);
  std::copy(bytes.begin(), bytes.end(), host.data<uint8_t>());
  return host.to(Device::cuda());
}

}  // namespace

size_t Nf4DeviceTensor::bytes() const {
  return packed.nbytes() + absmax_codes.nbytes() + absmax_scales.nbytes() + tables.nbytes();
}

Nf4DeviceTensor upload_nf4(const Nf4Tensor& q) {
  Nf4DeviceTensor d;
  d.shape = q.shape;
  d.packed = upload_bytes(q.packed);
  d.absmax_codes = upload_bytes(q.absmax_codes);
  d.absmax_scales = Tensor::from_vector(q.absmax_scales, {int64_t(q.absmax_scales.size())}).to(Device::cuda());
  std::vector<float> tables(dynamic_map_signed().begin(), dynamic_map_signed().end());
  tables.insert(tables.end(), nf4_code().begin(), nf4_code().end());
  d.tables = Tensor::from_vector(tables, {int64_t(tables.size())}).to(Device::cuda());
  d.offset = q.offset;
  return d;
}

void nf4_dequantize(const Nf4DeviceTensor& q, const Tensor& out) {
  constexpr std::string_view op = "nf4_dequantize";
  check_gpu_tensor(op, "out", out, {DType::BF16, DType::F32});
  MOETUNE_CHECK(out.numel() == shape_numel(q.shape), "{}: out {} for an NF4 tensor of shape {}", op, out.str(),
                shape_str(q.shape));
  const float* tables = static_cast<const float*>(q.tables.raw_data());
  gpu::check(launch_nf4_dequantize(device_data<const uint8_t>(q.packed), device_data<const uint8_t>(q.absmax_codes),
                                   device_data<const float>(q.absmax_scales), tables, tables + 256, q.offset,
                                   out.raw_data(), out.dtype() == DType::BF16, out.numel(), gpu::stream()),
             op);
}

}  // namespace moetune::ops::cuda
