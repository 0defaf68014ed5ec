#include "moetune/core/dependent_launch.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace moetune::gpu {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("MOETUNE_DEPENDENT_LAUNCH");
    if (setting && std::strcmp(setting, "0") == 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace moetune::gpu
