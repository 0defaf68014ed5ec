// The GPU's whole memory, for plans that size a run to it (train/micro_batch_fit.h). Kept out of device.h, which
// everything includes.
#pragma once

#include <cstdint>

namespace moetune {

// Bytes of GPU 0's memory (cudaMemGetInfo's total); 0 without CUDA or a GPU.
int64_t cuda_total_memory_bytes();

}  // namespace moetune
