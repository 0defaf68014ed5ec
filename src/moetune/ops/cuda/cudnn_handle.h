// The process's one cuDNN handle, bound to the engine's stream (gpu::stream()) so that cuDNN's kernels are
// ordered with everything else. Created on first use; fails with a clear message when the cuDNN library
// loaded at run time is older than the engine needs.
#pragma once

#include <cudnn.h>

#include <string_view>

namespace moetune::ops::cuda {

cudnnHandle_t cudnn_handle();

// Fails with an Error naming `what` and cuDNN's message.
void check_cudnn(cudnnStatus_t status, std::string_view what);

}  // namespace moetune::ops::cuda
