// Where a tensor's bytes live, and the raw memory calls for each place. Without CUDA (or without a GPU)
// the CUDA calls fail with an Error that says so; `cuda_device_count()` is then 0.
#pragma once

#include <cstddef>
#include <string>

namespace moetune {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// GPUs this process can use: 0 when built without CUDA, when no driver is loaded or no GPU is visible.
int cuda_device_count();
// Why there is no GPU (empty when there is one): the message a skipped GPU test prints.
std::string cuda_unavailable_reason();

void* device_allocate(size_t nbytes, Device device);
void device_free(void* data, Device device);
// Copies between any two places (host<->device, device<->device); blocks until done.
// Sets bytes to zero; on a GPU it is queued on the engine's stream and does not wait.
void zero_bytes(void* data, Device device, size_t nbytes);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace moetune
