#include "gpu_test_util.h"

#include <cmath>
#include <cstring>

#include "moetune/ops/cast.h"

namespace moetune::testing {

void GpuTest::SetUp() {
  if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
}

Tensor random_normal(const Shape& shape, DType dtype, Device device, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor host = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = normal(rng);
  Tensor cast = dtype == DType::F32 ? host : ops::cast(host, dtype);
  return device.is_cpu() ? cast : cast.to(device);
}

Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  Tensor host = Tensor::empty(shape, dtype);
  std::memset(host.raw_data(), 0xFF, host.nbytes());
  return device.is_cpu() ? host : host.to(device);
}

Tensor to_cpu_f32(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  return host.dtype() == DType::F32 ? host.clone() : ops::cast(host, DType::F32);
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  if (actual.numel() != expected.numel()) return INFINITY;
  const Tensor a = to_cpu_f32(actual), b = to_cpu_f32(expected);
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    if (!std::isfinite(x)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<int64_t> document_starts(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts;
  for (int64_t length : lengths)
    for (int64_t i = 0; i < length; ++i) starts.push_back(int64_t(starts.size()) - i);
  return starts;
}

}  // namespace moetune::testing
