// Whether the GPU ops launch their kernels with programmatic dependent launch (core/dependent_launch.cuh):
// on GPUs of compute capability 9.0 or later, unless MOETUNE_DEPENDENT_LAUNCH=0 (for measuring and bisecting).
// Read once, on the first launch.
#pragma once

namespace moetune::gpu {

bool dependent_launch_enabled();

}  // namespace moetune::gpu
