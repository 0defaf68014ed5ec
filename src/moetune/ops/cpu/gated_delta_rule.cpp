#include "moetune/ops/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moetune/core/error.h"

namespace moetune::ops {
namespace {

// transformers' l2norm: x · rsqrt(Σ x² + eps), the eps inside the root (FLA's convention).
constexpr double kL2NormEps = 1e-6;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch's softplus (beta 1, threshold 20): linear above the threshold.
float softplus(float u) { return u > 20.0f ? u : std::log1p(std::exp(u)); }
float softplus_slope(float u) { return u > 20.0f ? 1.0f : sigmoid(u); }

void check_rows(const char* name, const Tensor& t, int64_t rows, int64_t heads, int64_t dim) {
  MOETUNE_CHECK(t.defined() && t.dtype() == DType::F32 && t.device().is_cpu() && t.dim() == 2 && t.size(0) == rows &&
                    t.size(1) == heads * dim,
                "gated delta rule: {} is {}, want F32 [{}, {}] on the CPU ({} rows, {} heads of {})", name,
                t.defined() ? t.str() : "undefined", rows, heads * dim, rows, heads, dim);
}

void check_per_head(const char* name, const Tensor& t, int64_t heads) {
  MOETUNE_CHECK(t.defined() && t.dtype() == DType::F32 && t.device().is_cpu() && t.numel() == heads,
                "gated delta rule: {} is {}, want F32 [{}] on the CPU (one per value head)", name,
                t.defined() ? t.str() : "undefined", heads);
}

void check_inputs(const GatedDeltaInputs& in, const GatedDeltaParams& params, const GatedDeltaShape& shape,
                  const DocumentStarts& starts) {
  MOETUNE_CHECK(shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.k_head_dim > 0 && shape.v_head_dim > 0,
                "gated delta rule: shape of {} key heads of {}, {} value heads of {} has an empty dimension",
                shape.num_k_heads, shape.k_head_dim, shape.num_v_heads, shape.v_head_dim);
  MOETUNE_CHECK(shape.num_v_heads % shape.num_k_heads == 0,
                "gated delta rule: {} value heads do not share {} key heads evenly (linear_num_value_heads must be a "
                "multiple of linear_num_key_heads)",
                shape.num_v_heads, shape.num_k_heads);
  MOETUNE_CHECK(in.q.defined() && in.q.dim() == 2, "gated delta rule: q {} is not [rows, Hk·Dk]",
                in.q.defined() ? in.q.str() : "undefined");
  const int64_t rows = in.q.size(0);
  check_rows("q", in.q, rows, shape.num_k_heads, shape.k_head_dim);
  check_rows("k", in.k, rows, shape.num_k_heads, shape.k_head_dim);
  check_rows("v", in.v, rows, shape.num_v_heads, shape.v_head_dim);
  check_rows("a", in.a, rows, shape.num_v_heads, 1);
  check_rows("b", in.b, rows, shape.num_v_heads, 1);
  check_per_head("dt_bias", params.dt_bias, shape.num_v_heads);
  check_per_head("A_log", params.a_log, shape.num_v_heads);
  MOETUNE_CHECK(int64_t(starts.size()) == rows, "gated delta rule: {} document-start flags for {} rows", starts.size(),
                rows);
}

// x · scale · rsqrt(Σ x² + eps) into `out`; returns the rsqrt, which the backward pass reads.
float l2_normalize(const float* x, int64_t dim, float scale, float* out) {
  double squares = 0;
  for (int64_t i = 0; i < dim; ++i) squares += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(squares + kL2NormEps));
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * scale;
  return inv;
}

// The gradient through out = x · scale · inv, inv = (Σ x² + eps)^-1/2, given d(out):
// dx = scale · (inv · dout − x · inv³ · (x · dout)).
void l2_normalize_backward(const float* x, int64_t dim, float scale, float inv, const float* dout, float* dx) {
  double dot = 0;
  for (int64_t i = 0; i < dim; ++i) dot += double(x[i]) * dout[i];
  const float radial = float(dot) * inv * inv * inv;
  for (int64_t i = 0; i < dim; ++i) dx[i] = scale * (inv * dout[i] - x[i] * radial);
}

// What the recurrence reads per token, derived once from the raw inputs.
struct Prepared {
  std::vector<float> q, k;            // [N, Hk, Dk]: l2-normalized, q also scaled by Dk^-0.5
  std::vector<float> q_inv, k_inv;    // [N, Hk]: the l2norms' rsqrt
  std::vector<float> beta, g, decay;  // [N, Hv]: sigmoid(b), the log-decay g and exp(g)
};

float query_scale(const GatedDeltaShape& shape) { return float(1.0 / std::sqrt(double(shape.k_head_dim))); }

Prepared prepare(const GatedDeltaInputs& in, const GatedDeltaParams& params, const GatedDeltaShape& shape) {
  const int64_t rows = in.q.size(0), key_heads = rows * shape.num_k_heads, value_heads = rows * shape.num_v_heads;
  const int64_t dk = shape.k_head_dim;
  Prepared p{std::vector<float>(size_t(key_heads * dk)), std::vector<float>(size_t(key_heads * dk)),
             std::vector<float>(size_t(key_heads)),      std::vector<float>(size_t(key_heads)),
             std::vector<float>(size_t(value_heads)),    std::vector<float>(size_t(value_heads)),
             std::vector<float>(size_t(value_heads))};
  for (int64_t i = 0; i < key_heads; ++i) {
    p.q_inv[size_t(i)] = l2_normalize(in.q.data<float>() + i * dk, dk, query_scale(shape), p.q.data() + i * dk);
    p.k_inv[size_t(i)] = l2_normalize(in.k.data<float>() + i * dk, dk, 1.0f, p.k.data() + i * dk);
  }
  for (int64_t i = 0; i < value_heads; ++i) {
    const int64_t h = i % shape.num_v_heads;
    p.beta[size_t(i)] = sigmoid(in.b.data<float>()[i]);
    const float u = in.a.data<float>()[i] + params.dt_bias.data<float>()[h];
    p.g[size_t(i)] = -std::exp(params.a_log.data<float>()[h]) * softplus(u);
    p.decay[size_t(i)] = std::exp(p.g[size_t(i)]);
  }
  return p;
}

// What token n of value head h reads: its key head's normalized q and k (key head h / (Hv / Hk), transformers'
// repeat_interleave) [Dk], its v [Dv], beta and decay exp(g).
struct HeadToken {
  const float *q, *k, *v;
  float beta, decay;
};

HeadToken head_token(const Prepared& p, const Tensor& v, const GatedDeltaShape& shape, int64_t n, int64_t h) {
  const int64_t key = (n * shape.num_k_heads + h / (shape.num_v_heads / shape.num_k_heads)) * shape.k_head_dim;
  const int64_t value = n * shape.num_v_heads + h;
  return {p.q.data() + key, p.k.data() + key, v.data<float>() + value * shape.v_head_dim, p.beta[size_t(value)],
          p.decay[size_t(value)]};
}

// One token of one head: S = decay · previous (zeros where previous is null), then the delta rule's write
// S += k ⊗ beta · (v − Sᵀ k). `delta` [Dv] is scratch.
void delta_step(const float* previous, const HeadToken& t, int64_t dk, int64_t dv, float* state, float* delta) {
  for (int64_t i = 0; i < dk * dv; ++i) state[i] = previous ? t.decay * previous[i] : 0.0f;
  std::fill_n(delta, dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) delta[j] += state[i * dv + j] * t.k[i];
  for (int64_t j = 0; j < dv; ++j) delta[j] = (t.v[j] - delta[j]) * t.beta;
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) state[i * dv + j] += t.k[i] * delta[j];
}

// The states after rows [first, first + count), [count, Hv, Dk, Dv], into `out`: the recurrence from `before` (the
// state after row first − 1, [Hv, Dk, Dv]; null for zeros), restarting where `starts` flags a row.
void run_states(const Prepared& p, const Tensor& v, const GatedDeltaShape& shape, const DocumentStarts& starts,
                int64_t first, int64_t count, const float* before, float* out) {
  const int64_t heads = shape.num_v_heads, dk = shape.k_head_dim, dv = shape.v_head_dim;
  const int64_t per_head = dk * dv, per_row = heads * per_head;
  std::vector<float> delta(static_cast<size_t>(dv));
  for (int64_t n = first; n < first + count; ++n) {
    float* state = out + (n - first) * per_row;
    const float* previous = starts[size_t(n)] ? nullptr : n == first ? before : state - per_row;
    for (int64_t h = 0; h < heads; ++h)
      delta_step(previous ? previous + h * per_head : nullptr, head_token(p, v, shape, n, h), dk, dv,
                 state + h * per_head, delta.data());
  }
}

// The backward pass holds the state at the start of every kSegment rows and recomputes a segment's states when it
// reaches it: (N / kSegment + kSegment) states instead of N (a 4096-token row of Qwen3-Next's 32 value heads of
// 128 x 128 would hold 8.6 GB otherwise).
constexpr int64_t kSegment = 64;

// The per-token gradients the recurrence produces before the chain back to the raw inputs.
struct StepGrads {
  std::vector<float> q, k;     // [N, Hk, Dk]: d(normalized q / k), summed over the value heads sharing a key head
  std::vector<float> beta, g;  // [N, Hv]
};

// Where one token of one head's gradients go: q and k accumulate (a key head serves several value heads).
struct HeadGrads {
  float *q, *k, *v, *beta, *g;
};

// Back through the recurrence for one token n of one value head. `adjoint` [Dk, Dv] holds dL/dS_n from the later
// rows; on return it holds dL/dS_{n-1} (zeros where row n starts its document: `previous` null).
// With P = decay · S_{n-1}, m = Pᵀ k, delta = beta · (v − m), S_n = P + k ⊗ delta, out = S_nᵀ q:
//   dS_n += q ⊗ dout, d delta = dS_nᵀ k, dm = −beta · d delta, dP = dS_n + k ⊗ dm, d decay = Σ dP ⊙ S_{n-1}.
// `scratch` holds 2·Dv floats.
void step_backward(const float* dout, const float* state, const float* previous, const HeadToken& t, int64_t dk,
                   int64_t dv, float* adjoint, const HeadGrads& grad, float* scratch) {
  float* memory = scratch;      // m
  float* ddelta = memory + dv;  // d delta
  std::fill_n(scratch, 2 * dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float read = 0;
    for (int64_t j = 0; j < dv; ++j) {
      adjoint[i * dv + j] += t.q[i] * dout[j];
      read += state[i * dv + j] * dout[j];
      if (previous) memory[j] += t.decay * previous[i * dv + j] * t.k[i];
    }
    grad.q[i] += read;
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) ddelta[j] += adjoint[i * dv + j] * t.k[i];
  *grad.beta = 0;
  for (int64_t j = 0; j < dv; ++j) {
    const float delta = t.beta * (t.v[j] - memory[j]);
    for (int64_t i = 0; i < dk; ++i) grad.k[i] += adjoint[i * dv + j] * delta;
    grad.v[j] = t.beta * ddelta[j];
    *grad.beta += ddelta[j] * (t.v[j] - memory[j]);
  }
  *grad.g = 0;
  if (!previous) {
    std::fill_n(adjoint, dk * dv, 0.0f);
    return;
  }
  // dm reaches k through m = decay · S_{n-1}ᵀ k, and S_{n-1} through P.
  float ddecay = 0;
  for (int64_t i = 0; i < dk; ++i) {
    float through_memory = 0;
    for (int64_t j = 0; j < dv; ++j) {
      const float dmemory = -t.beta * ddelta[j];
      through_memory += previous[i * dv + j] * dmemory;
      const float dp = adjoint[i * dv + j] + t.k[i] * dmemory;
      ddecay += dp * previous[i * dv + j];
      adjoint[i * dv + j] = t.decay * dp;
    }
    grad.k[i] += t.decay * through_memory;
  }
  *grad.g = t.decay * ddecay;  // d exp(g) / dg = exp(g)
}

// Reverse time over all rows, d(v) straight into `dv`; row 0 starts from zeros.
StepGrads recurrence_backward(const Tensor& dout, const GatedDeltaInputs& in, const Prepared& p,
                              const GatedDeltaShape& shape, const DocumentStarts& starts, const Tensor& dv) {
  const int64_t rows = in.q.size(0), heads = shape.num_v_heads, dk = shape.k_head_dim, dvd = shape.v_head_dim;
  const int64_t per_head = dk * dvd, per_row = heads * per_head, segments = (rows + kSegment - 1) / kSegment;
  // checkpoints[s]: the state after the row before segment s (segment 0: zeros, never read).
  std::vector<float> checkpoints(size_t(segments * per_row), 0.0f), segment(size_t(kSegment * per_row));
  for (int64_t s = 1; s < segments; ++s) {
    run_states(p, in.v, shape, starts, (s - 1) * kSegment, kSegment, s == 1 ? nullptr : &checkpoints[(s - 1) * per_row],
               segment.data());
    std::copy_n(segment.data() + (kSegment - 1) * per_row, per_row, checkpoints.data() + s * per_row);
  }
  StepGrads grads{std::vector<float>(p.q.size(), 0.0f), std::vector<float>(p.k.size(), 0.0f),
                  std::vector<float>(p.beta.size(), 0.0f), std::vector<float>(p.g.size(), 0.0f)};
  std::vector<float> adjoint(size_t(per_row), 0.0f), scratch(size_t(2 * dvd));
  for (int64_t s = segments - 1; s >= 0; --s) {
    const int64_t first = s * kSegment, count = std::min(kSegment, rows - first);
    const float* before = s == 0 ? nullptr : &checkpoints[s * per_row];
    run_states(p, in.v, shape, starts, first, count, before, segment.data());
    for (int64_t n = first + count - 1; n >= first; --n) {
      const float* state = segment.data() + (n - first) * per_row;
      const float* previous = n > 0 && !starts[size_t(n)] ? (n == first ? before : state - per_row) : nullptr;
      for (int64_t h = 0; h < heads; ++h) {
        const HeadToken t = head_token(p, in.v, shape, n, h);
        const int64_t key = t.q - p.q.data(), value = n * heads + h;
        const HeadGrads grad{grads.q.data() + key, grads.k.data() + key, dv.data<float>() + value * dvd,
                             grads.beta.data() + value, grads.g.data() + value};
        step_backward(dout.data<float>() + value * dvd, state + h * per_head,
                      previous ? previous + h * per_head : nullptr, t, dk, dvd, adjoint.data() + h * per_head, grad,
                      scratch.data());
      }
    }
  }
  return grads;
}

}  // namespace

Tensor gated_delta_rule_forward(const GatedDeltaInputs& in, const GatedDeltaParams& params,
                                const GatedDeltaShape& shape, const DocumentStarts& starts, const Tensor& state) {
  check_inputs(in, params, shape, starts);
  const int64_t rows = in.q.size(0), heads = shape.num_v_heads, dk = shape.k_head_dim, dv = shape.v_head_dim;
  const int64_t per_row = heads * dk * dv;
  if (state.defined())
    MOETUNE_CHECK(state.dtype() == DType::F32 && state.device().is_cpu() && state.shape() == Shape({heads, dk, dv}),
                  "gated_delta_rule_forward: state {} must be F32 [{}, {}, {}] on the CPU", state.str(), heads, dk, dv);
  const Prepared p = prepare(in, params, shape);
  // One row's state at a time, carried from row to row (generation's `state` continues it).
  std::vector<float> current(size_t(per_row), 0.0f);
  if (state.defined()) std::copy_n(state.data<float>(), per_row, current.data());
  Tensor out = Tensor::zeros(in.v.shape(), DType::F32);
  for (int64_t n = 0; n < rows; ++n) {
    const bool from_before = n > 0 || state.defined();
    run_states(p, in.v, shape, starts, n, 1, from_before ? current.data() : nullptr, current.data());
    for (int64_t h = 0; h < heads; ++h) {
      const float* s = current.data() + h * dk * dv;
      const float* q = head_token(p, in.v, shape, n, h).q;
      float* o = out.data<float>() + (n * heads + h) * dv;
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) o[j] += s[i * dv + j] * q[i];
    }
  }
  if (state.defined() && rows > 0) std::copy_n(current.data(), per_row, state.data<float>());
  return out;
}

GatedDeltaInputs gated_delta_rule_backward(const Tensor& dout, const GatedDeltaInputs& in,
                                           const GatedDeltaParams& params, const GatedDeltaShape& shape,
                                           const DocumentStarts& starts, const GatedDeltaParams& dparams) {
  check_inputs(in, params, shape, starts);
  const int64_t rows = in.q.size(0), heads = shape.num_v_heads, dk = shape.k_head_dim;
  check_rows("dout", dout, rows, heads, shape.v_head_dim);
  if (dparams.dt_bias.defined()) check_per_head("d(dt_bias)", dparams.dt_bias, heads);
  if (dparams.a_log.defined()) check_per_head("d(A_log)", dparams.a_log, heads);
  const Prepared p = prepare(in, params, shape);
  GatedDeltaInputs grad{Tensor::empty(in.q.shape(), DType::F32), Tensor::empty(in.k.shape(), DType::F32),
                        Tensor::empty(in.v.shape(), DType::F32), Tensor::empty(in.a.shape(), DType::F32),
                        Tensor::empty(in.b.shape(), DType::F32)};
  const StepGrads steps = recurrence_backward(dout, in, p, shape, starts, grad.v);
  for (int64_t i = 0; i < rows * shape.num_k_heads; ++i) {
    l2_normalize_backward(in.q.data<float>() + i * dk, dk, query_scale(shape), p.q_inv[size_t(i)],
                          steps.q.data() + i * dk, grad.q.data<float>() + i * dk);
    l2_normalize_backward(in.k.data<float>() + i * dk, dk, 1.0f, p.k_inv[size_t(i)], steps.k.data() + i * dk,
                          grad.k.data<float>() + i * dk);
  }
  for (int64_t i = 0; i < rows * heads; ++i) {
    const int64_t h = i % heads;
    const float beta = p.beta[size_t(i)], dg = steps.g[size_t(i)];
    grad.b.data<float>()[i] = steps.beta[size_t(i)] * beta * (1.0f - beta);
    // g = −exp(A_log) · softplus(a + dt_bias): dg/da = dg/d dt_bias = −exp(A_log) · sigmoid(u), dg/dA_log = g.
    const float u = in.a.data<float>()[i] + params.dt_bias.data<float>()[h];
    const float da = dg * -std::exp(params.a_log.data<float>()[h]) * softplus_slope(u);
    grad.a.data<float>()[i] = da;
    if (dparams.dt_bias.defined()) dparams.dt_bias.data<float>()[h] += da;
    if (dparams.a_log.defined()) dparams.a_log.data<float>()[h] += dg * p.g[size_t(i)];
  }
  return grad;
}

}  // namespace moetune::ops
