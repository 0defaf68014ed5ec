// What only the CPU engine runs so far. GPT-OSS brought attention sinks, sliding windows, YaRN, a biased
// top-k-then-softmax router and biased experts with a clamped SwiGLU to the CPU reference; the GPU blocks have
// none of them yet, so the GPU model refuses such a spec by naming what is missing instead of training something
// else than transformers does. DeepSeek-V3's multi-head latent attention and sigmoid group-limited router are
// CPU-only too, as are Nemotron-H's Mamba2 mixers, relu² MLPs and experts, latent MoE and attention without RoPE.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/model_spec.h"

namespace moetune::model {

// The features of `spec` the GPU engine does not implement, each once, in layer order; empty when it runs all.
std::vector<std::string> features_missing_on_gpu(const ModelSpec& spec);

// Fails naming the architecture and every missing feature (and how to train it anyway: on the CPU).
void require_gpu_support(const ModelSpec& spec);

}  // namespace moetune::model
