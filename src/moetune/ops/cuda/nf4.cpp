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

// The quantization's midpoints in one device table: the NF4 code's 15, then the signed dynamic map's 255.
struct QuantizeTables {
  Tensor table;
  static QuantizeTables upload() {
    std::vector<float> values = code_midpoints(nf4_code().data(), 16);
    const std::vector<float> map = code_midpoints(dynamic_map_signed().data(), 256);
    values.insert(values.end(), map.begin(), map.end());
    return {Tensor::from_vector(values, {int64_t(values.size())}).to(Device::cuda())};
  }
  const float* nf4() const { return static_cast<const float*>(table.raw_data()); }
  const float* absmax_map() const { return nf4() + 15; }
};

// The dequantization's tables: the signed dynamic map, then the NF4 code.
Tensor dequantize_tables() {
  std::vector<float> tables(dynamic_map_signed().begin(), dynamic_map_signed().end());
  tables.insert(tables.end(), nf4_code().begin(), nf4_code().end());
  return Tensor::from_vector(tables, {int64_t(tables.size())}).to(Device::cuda());
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
  d.tables = dequantize_tables();
  d.offset = q.offset;
  return d;
}

Nf4DeviceTensor nf4_quantize(const Tensor& x) {
  constexpr std::string_view op = "nf4_quantize";
  check_gpu_tensor(op, "x", x, {DType::BF16, DType::F32});
  const int64_t n = x.numel(), blocks = (n + kNf4BlockSize - 1) / kNf4BlockSize;
  const QuantizeTables tables = QuantizeTables::upload();
  Nf4DeviceTensor d;
  d.shape = x.shape();
  d.packed = Tensor::empty({(n + 1) / 2}, DType::U8, Device::cuda());
  Tensor absmax = Tensor::empty({blocks}, DType::F32, Device::cuda());
  gpu::check(launch_quantize_blocks(x.raw_data(), x.dtype() == DType::BF16, 0.0f, n, int(kNf4BlockSize), tables.nf4(), 15,
                                    /*pack_nibbles=*/true, device_data<uint8_t>(d.packed), device_data<float>(absmax),
                                    gpu::stream()),
             op);
  const Tensor host_absmax = absmax.to(Device::cpu());  // waits for the codes
  d.offset = nf4_absmax_mean(std::vector<float>(host_absmax.data<float>(), host_absmax.data<float>() + blocks));
  d.absmax_codes = Tensor::empty({blocks}, DType::U8, Device::cuda());
  d.absmax_scales = Tensor::empty({(blocks + kNf4AbsmaxBlockSize - 1) / kNf4AbsmaxBlockSize}, DType::F32, Device::cuda());
  gpu::check(launch_quantize_blocks(absmax.raw_data(), /*x_is_bf16=*/false, d.offset, blocks, int(kNf4AbsmaxBlockSize),
                                    tables.absmax_map(), 255, /*pack_nibbles=*/false, device_data<uint8_t>(d.absmax_codes),
                                    device_data<float>(d.absmax_scales), gpu::stream()),
             op);
  d.tables = dequantize_tables();
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
