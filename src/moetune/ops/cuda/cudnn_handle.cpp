#include "moetune/ops/cuda/cudnn_handle.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"

namespace moetune::ops::cuda {
namespace {

// Ragged (THD) attention with ragged softmax statistics and int64 ragged offsets needs 9.6.
constexpr size_t kMinimumCudnnVersion = 90600;

}  // namespace

void check_cudnn(cudnnStatus_t status, std::string_view what) {
  if (status != CUDNN_STATUS_SUCCESS) fail("cuDNN {} failed: {}", what, cudnnGetErrorString(status));
}

cudnnHandle_t cudnn_handle() {
  // A function-local static built after the CUDA runtime initialised, so its destructor runs before the
  // runtime's exit handler and can destroy the handle (which keeps compute-sanitizer's leak check clean).
  struct Handle {
    cudnnHandle_t h = nullptr;
    Handle() {
      const size_t version = cudnnGetVersion();
      MOETUNE_CHECK(version >= kMinimumCudnnVersion,
                    "cuDNN {}.{}.{} is loaded; moetune needs cuDNN 9.6 or newer (pip install nvidia-cudnn-cu13)",
                    version / 10000, version / 100 % 100, version % 100);
      check_cudnn(cudnnCreate(&h), "cudnnCreate");
    }
    ~Handle() { cudnnDestroy(h); }
  };
  static Handle handle;
  // Bound to the caller's current stream each time (a StreamScope may have changed it); the call is cheap.
  check_cudnn(cudnnSetStream(handle.h, gpu::stream()), "cudnnSetStream");
  return handle.h;
}

}  // namespace moetune::ops::cuda
