// LoRA dropout (PEFT's nn.Dropout on an adapter's input: lora_B(lora_A(dropout(x))) · scale) with a counter-based
// mask: element i of draw `draw` (the step and micro-batch) of module `module` (the adapter's name) is kept when a
// hash of (seed, module, draw, i) clears a threshold. Nothing is stored and nothing depends on the order of evaluation, so the CPU engine, a GPU kernel and
// a recomputed forward pass (training.recompute) all see the same mask, and the backward pass regenerates it
// instead of keeping it. Kept values are scaled by 1/(1-p) as torch's dropout does. The masks are not torch's
// (no bitwise parity with PEFT is possible with any RNG but torch's own), only the same distribution.
#pragma once

#include <cstdint>
#include <string_view>

#include "moetune/core/half.h"

namespace moetune::ops {

// splitmix64's finaliser: a bijection of 64-bit words whose output bits each depend on every input bit.
MOETUNE_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One mask: which draw of which module, and the rate. Inactive (rate 0, or not a training step): the identity.
struct LoraDropout {
  uint64_t key = 0;        // mix of the seed, the module and the draw
  uint32_t threshold = 0;  // p · 2^32: an element whose 32 hash bits are below it is dropped
  float scale = 1;         // 1 / (1 - p), applied to the kept elements
  MOETUNE_HOST_DEVICE bool active() const { return threshold != 0; }
  MOETUNE_HOST_DEVICE bool keeps(uint64_t index) const {
    return uint32_t(mix64(key + index * 0x9e3779b97f4a7c15ull) >> 32) >= threshold;
  }
  // The dropped-out value of element `index` (0, or value · scale in float32).
  MOETUNE_HOST_DEVICE float apply(uint64_t index, float value) const { return keeps(index) ? value * scale : 0.0f; }
};

// A stable 64-bit name of a module (FNV-1a), so the masks do not change with the standard library's hash.
inline uint64_t lora_module_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

// Draw `draw` (the engines number a step's training forwards step·2²⁰ + micro-batch) of module `module` at
// rate p; inactive when p is 0.
inline LoraDropout lora_dropout(double p, uint64_t seed, uint64_t module, uint64_t draw) {
  LoraDropout d;
  if (!(p > 0)) return d;
  d.key = mix64(mix64(seed ^ module) + draw);
  const double threshold = p * 4294967296.0;
  d.threshold = threshold >= 4294967295.0 ? 4294967295u : threshold < 1 ? 1u : uint32_t(threshold);
  d.scale = float(1.0 / (1.0 - p));
  return d;
}

}  // namespace moetune::ops
