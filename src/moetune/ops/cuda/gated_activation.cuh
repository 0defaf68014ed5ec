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

// The gated MLPs' other gate functions (ops/activation.h's GateFunction, transformers' hidden_act): f(gate) · up
// with f and f' in the accurate fp32 functions (these gates are rare; their kernels are the plain grid-stride ones).
template <typename Gate>
struct GatedBy {
  Gate gate;
  __device__ __forceinline__ float forward(float g, float u) const { return gate.value(g) * u; }
  __device__ __forceinline__ void backward(float g, float u, float d, float& dg, float& du) const {
    du = d * gate.value(g);
    dg = d * u * gate.slope(g);
  }
};
struct GeluGate {  // g Φ(g), the exact GELU
  __device__ __forceinline__ float value(float g) const { return g * 0.5f * (1.0f + erff(g * 0.70710678118654752f)); }
  __device__ __forceinline__ float slope(float g) const {
    return 0.5f * (1.0f + erff(g * 0.70710678118654752f)) + g * 0.39894228040143268f * expf(-0.5f * g * g);
  }
};
struct GeluTanhGate {  // ½ g (1 + tanh(√(2/π) (g + 0.044715 g³)))
  static constexpr float kSqrt2OverPi = 0.79788456080286536f, kCubic = 0.044715f;
  __device__ __forceinline__ float value(float g) const {
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + kCubic * g * g * g)));
  }
  __device__ __forceinline__ float slope(float g) const {
    const float t = tanhf(kSqrt2OverPi * (g + kCubic * g * g * g));
    return 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * g * g);
  }
};
struct QuickGeluGate {  // g σ(1.702 g)
  __device__ __forceinline__ float value(float g) const { return g / (1.0f + expf(-1.702f * g)); }
  __device__ __forceinline__ float slope(float g) const {
    const float s = 1.0f / (1.0f + expf(-1.702f * g));
    return s + 1.702f * g * s * (1.0f - s);
  }
};
struct ReluGate {  // torch's relu: no gradient at 0
  __device__ __forceinline__ float value(float g) const { return g > 0.0f ? g : 0.0f; }
  __device__ __forceinline__ float slope(float g) const { return g > 0.0f ? 1.0f : 0.0f; }
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
