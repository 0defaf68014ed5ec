// What only the CPU engine runs so far, so that the GPU model refuses such a spec by naming what is missing instead
// of computing something else than transformers does. Every family trains on the GPU (Nemotron-H's Mamba2 mixers,
// relu² MLPs and experts, latent MoE and attention without RoPE included), but the GPU's generation path (the
// KV-cached attention and its decode kernel, which run sinks, sliding windows, YaRN's scaling and latent attention
// as the forward pass does, and Mamba2's conv and scan continued from a cached state) runs every one of them.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/model_spec.h"

namespace moetune::model {

// The features of `spec` the GPU engine does not implement, each once, in layer order; empty when it runs all.
std::vector<std::string> features_missing_on_gpu(const ModelSpec& spec);

// Fails naming the architecture and every missing feature (and how to train it anyway: on the CPU).
void require_gpu_support(const ModelSpec& spec);

// As features_missing_on_gpu, for generation (prefill and decode with the KV cache) rather than training.
std::vector<std::string> features_missing_for_gpu_generation(const ModelSpec& spec);

// Fails naming the architecture and what GPU generation lacks (and how to generate anyway: on the CPU).
void require_gpu_generation_support(const ModelSpec& spec);

}  // namespace moetune::model
