// Large host-to-GPU copies (checkpoint loading: tens of GB of mapped safetensors pages) through pinned staging
// buffers: several threads copy each chunk of the source into a pinned buffer (so the page faults of a freshly
// mapped file are taken in parallel, not one at a time by the driver's single staging thread), and the DMA
// engine uploads one buffer while the threads fill the next. CUDA builds only (core/device.cpp calls it).
#pragma once

#include <cstddef>

namespace moetune {

// Copies below this size go straight through cudaMemcpy: the staging would not pay for itself.
inline constexpr size_t kStagedUploadMinBytes = size_t(64) << 20;

// dst (GPU) <- src (host, pageable: malloc'ed or a mapped file), nbytes; returns once the copy is complete.
void staged_upload(void* dst, const void* src, size_t nbytes);

}  // namespace moetune
