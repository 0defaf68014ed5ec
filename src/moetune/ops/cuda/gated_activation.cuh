// The gated activations the SwiGLU kernels apply per (gate, up) pair, fp32 math: SwiGLU and GPT-OSS's clamped
// SwiGLU (ops/activation.h), forward and backward. Device code only; shared by the kernel shapes of
// activation.cu and gated_staged.cuh, which must give the same bits (one definition of the arithmetic).
#pragma once

namespace moetune::ops::cuda::gated {

// The SFU's exponential and reciprocal (~2 ulp each, where expf's range reduction and the IEEE division take ~20
// instructions between them): the kernels move 6 (forward) to 10 (backward) bytes a value, and inside the training
// step, whose power cap holds the SM clock near 1.5 GHz, the instructions per value set their speed as much as DRAM
// does (docs/benchmarks.md, session 22). A gate below ~-88 makes exp(-x) inf and __fdividef(1, inf) 0, as it should.
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

struct Silu {
  __device__ __forceinline__ float forward(float g, float u) const { return g * sigmoid(g) * u; }
  __device__ __forceinline__ void backward(float g, float u, float d, float& dg, float& du) const {
    const float s = sigmoid(g);
    du = d * g * s;
    dg = d * u * s * (1.0f + g * (1.0f - s));  // d silu = s (1 + g (1 - s))
  }
};

// GPT-OSS (ops/activation.h's clamped_swiglu_*): a clamped value passes no gradient, as torch's clamp.
struct ClampedSilu {
  float alpha, limit;
  __device__ __forceinline__ float forward(float gate, float up) const {
    const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
    return (u + 1.0f) * (g * sigmoid(g * alpha));
  }
  __device__ __forceinline__ void backward(float gate, float up, float d, float& dg, float& du) const {
    const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
    const float s = sigmoid(g * alpha);
    du = up >= -limit && up <= limit ? d * g * s : 0.0f;
    dg = gate <= limit ? d * (u + 1.0f) * (s + alpha * g * s * (1.0f - s)) : 0.0f;
  }
};

}  // namespace moetune::ops::cuda::gated
