// What of a model description the GPU engine cannot run yet, checked before any GPU block is built so the
// error names the missing feature instead of a parameter the GPU blocks look for. Device-neutral (it reads
// only the description), so CPU builds test it too.
#pragma once

#include <optional>
#include <string>

#include "moetune/model/model_spec.h"

namespace moetune::model {

// The first feature the GPU engine lacks for `spec`, in words; nullopt when the GPU engine runs it all.
std::optional<std::string> gpu_missing_feature(const ModelSpec& spec);

// Fails naming the architecture and the missing feature (and that the CPU engine runs it) when there is one.
void require_gpu_support(const ModelSpec& spec);

}  // namespace moetune::model
