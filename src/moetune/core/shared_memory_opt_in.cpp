#include "moetune/core/shared_memory_opt_in.h"

#include <mutex>
#include <set>
#include <utility>

namespace moetune::gpu {

cudaError_t dynamic_shared_memory_limit(int& bytes) {
  int device = 0;
  if (const cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  return cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

cudaError_t allow_dynamic_shared_memory(const void* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> allowed;  // (kernel, device)
  int device = 0, limit = 0;
  if (const cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  const std::lock_guard<std::mutex> lock(mutex);
  if (allowed.count({kernel, device})) return cudaSuccess;
  if (const cudaError_t status = dynamic_shared_memory_limit(limit); status != cudaSuccess) return status;
  cudaFuncAttributes attributes{};
  if (const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel); status != cudaSuccess) return status;
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  limit - int(attributes.sharedSizeBytes));
  if (status == cudaSuccess) allowed.insert({kernel, device});
  return status;
}

}  // namespace moetune::gpu
