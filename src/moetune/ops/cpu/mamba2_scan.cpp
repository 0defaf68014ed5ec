#include <algorithm>
#include <cmath>

#include "moetune/core/error.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops {
namespace {

// torch's softplus (beta 1, threshold 20): linear above the threshold.
float softplus(float u) { return u > 20.0f ? u : std::log1p(std::exp(u)); }
float softplus_slope(float u) { return u > 20.0f ? 1.0f : 1.0f / (1.0f + std::exp(-u)); }

void check_scan(const Mamba2ScanInputs& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                const DocumentStarts& starts) {
  const int64_t rows = in.x.size(0);
  MOETUNE_CHECK(scan.num_groups > 0 && scan.num_heads % scan.num_groups == 0,
                "mamba2 scan: {} heads do not split into {} groups (mamba_num_heads must be a multiple of n_groups)",
                scan.num_heads, scan.num_groups);
  MOETUNE_CHECK(in.x.dim() == 2 && in.x.size(1) == scan.num_heads * scan.head_dim, "mamba2 scan: x {} for {} heads of {}",
                in.x.str(), scan.num_heads, scan.head_dim);
  MOETUNE_CHECK(in.dt.numel() == rows * scan.num_heads, "mamba2 scan: dt {} for {} rows and {} heads", in.dt.str(),
                rows, scan.num_heads);
  for (const Tensor* t : {&in.b, &in.c})
    MOETUNE_CHECK(t->numel() == rows * scan.num_groups * scan.state_size, "mamba2 scan: B/C {} for {} rows, {} groups of {}",
                  t->str(), rows, scan.num_groups, scan.state_size);
  for (const Tensor* t : {&params.dt_bias, &params.a_log, &params.d})
    MOETUNE_CHECK(t->numel() == scan.num_heads, "mamba2 scan: per-head parameter {} for {} heads", t->str(), scan.num_heads);
  MOETUNE_CHECK(int64_t(starts.size()) == rows, "mamba2 scan: {} document-start flags for {} rows", starts.size(), rows);
}

// What the recurrence needs per token and head, derived once: dt after softplus and clamp, and its decay.
struct Steps {
  std::vector<float> dt, decay, slope;  // [N, H]; slope = d dt / d dt_raw (0 where clamped)
};

Steps discretize(const Mamba2ScanInputs& in, const Mamba2ScanParams& params, const Mamba2Scan& scan) {
  const int64_t rows = in.x.size(0), heads = scan.num_heads;
  Steps steps{std::vector<float>(size_t(rows * heads)), std::vector<float>(size_t(rows * heads)),
              std::vector<float>(size_t(rows * heads))};
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = size_t(n * heads + h);
      const float u = in.dt.data<float>()[i] + params.dt_bias.data<float>()[h];
      const float soft = softplus(u);
      // torch.clamp passes the gradient where min <= x <= max.
      const bool inside = soft >= float(scan.dt_min) && soft <= float(scan.dt_max);
      steps.dt[i] = std::clamp(soft, float(scan.dt_min), float(scan.dt_max));
      steps.slope[i] = inside ? softplus_slope(u) : 0.0f;
      const float a = -std::exp(params.a_log.data<float>()[h]);
      steps.decay[i] = std::exp(steps.dt[i] * a);
    }
  return steps;
}

// Every state after each token, [N, H, P, S]: what the backward pass reads (the oracle keeps it simple).
// `initial`: the state before row 0 ([H, P, S]), or null for zeros.
std::vector<float> run_states(const Mamba2ScanInputs& in, const Mamba2Scan& scan, const Steps& steps,
                              const DocumentStarts& starts, const float* initial = nullptr) {
  const int64_t rows = in.x.size(0), heads = scan.num_heads, dim = scan.head_dim, size = scan.state_size;
  const int64_t per_group = heads / scan.num_groups, per_row = heads * dim * size;
  std::vector<float> states(size_t(rows * per_row));
  for (int64_t n = 0; n < rows; ++n) {
    float* state = states.data() + n * per_row;
    const float* previous = starts[size_t(n)] ? nullptr : n == 0 ? initial : state - per_row;
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = size_t(n * heads + h);
      const float* b = in.b.data<float>() + (n * scan.num_groups + h / per_group) * size;
      for (int64_t p = 0; p < dim; ++p) {
        const float dtx = steps.dt[i] * in.x.data<float>()[(n * heads + h) * dim + p];
        const int64_t at = (h * dim + p) * size;
        for (int64_t s = 0; s < size; ++s)
          state[at + s] = (previous ? steps.decay[i] * previous[at + s] : 0.0f) + dtx * b[s];
      }
    }
  }
  return states;
}

}  // namespace

Tensor mamba2_scan_forward(const Mamba2ScanInputs& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                           const DocumentStarts& starts, const Tensor& state) {
  check_scan(in, params, scan, starts);
  const int64_t per_row = scan.num_heads * scan.head_dim * scan.state_size;
  if (state.defined())
    MOETUNE_CHECK(state.dtype() == DType::F32 && state.device().is_cpu() &&
                      state.shape() == Shape({scan.num_heads, scan.head_dim, scan.state_size}),
                  "mamba2_scan_forward: state {} must be F32 [{}, {}, {}] on the CPU", state.str(), scan.num_heads,
                  scan.head_dim, scan.state_size);
  const Steps steps = discretize(in, params, scan);
  const std::vector<float> states =
      run_states(in, scan, steps, starts, state.defined() ? state.data<float>() : nullptr);
  if (state.defined() && !states.empty()) std::copy(states.end() - per_row, states.end(), state.data<float>());
  const int64_t rows = in.x.size(0), heads = scan.num_heads, dim = scan.head_dim, size = scan.state_size;
  const int64_t per_group = heads / scan.num_groups;
  Tensor y = Tensor::empty(in.x.shape(), DType::F32);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const float* c = in.c.data<float>() + (n * scan.num_groups + h / per_group) * size;
      for (int64_t p = 0; p < dim; ++p) {
        const int64_t at = (n * heads + h) * dim + p;
        const float* row_state = states.data() + at * size;
        float total = params.d.data<float>()[h] * in.x.data<float>()[at];
        for (int64_t s = 0; s < size; ++s) total += row_state[s] * c[s];
        y.data<float>()[at] = total;
      }
    }
  return y;
}

Mamba2ScanInputs mamba2_scan_backward(const Tensor& dy, const Mamba2ScanInputs& in, const Mamba2ScanParams& params,
                                      const Mamba2Scan& scan, const DocumentStarts& starts,
                                      const Mamba2ScanParams& dparams) {
  check_scan(in, params, scan, starts);
  const Steps steps = discretize(in, params, scan);
  const std::vector<float> states = run_states(in, scan, steps, starts);
  const int64_t rows = in.x.size(0), heads = scan.num_heads, dim = scan.head_dim, size = scan.state_size;
  const int64_t per_group = heads / scan.num_groups, per_row = heads * dim * size;
  Mamba2ScanInputs grad{Tensor::zeros(in.x.shape(), DType::F32), Tensor::zeros(in.dt.shape(), DType::F32),
                        Tensor::zeros(in.b.shape(), DType::F32), Tensor::zeros(in.c.shape(), DType::F32)};
  std::vector<float> ddt(size_t(rows * heads), 0.0f), da(size_t(heads), 0.0f), dd(size_t(heads), 0.0f);
  // adjoint: dL/d state_n, carried backwards through the decay of the token after it.
  std::vector<float> adjoint(size_t(per_row), 0.0f);
  for (int64_t n = rows - 1; n >= 0; --n) {
    const bool carried = n + 1 < rows && !starts[size_t(n + 1)];
    const float* state = states.data() + n * per_row;
    const float* previous = (n == 0 || starts[size_t(n)]) ? nullptr : state - per_row;
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = size_t(n * heads + h);
      const int64_t group = n * scan.num_groups + h / per_group;
      const float* b = in.b.data<float>() + group * size;
      const float* c = in.c.data<float>() + group * size;
      float* db = grad.b.data<float>() + group * size;
      float* dc = grad.c.data<float>() + group * size;
      const float next_decay = carried ? steps.decay[size_t((n + 1) * heads + h)] : 0.0f;
      const float a = -std::exp(params.a_log.data<float>()[h]);
      for (int64_t p = 0; p < dim; ++p) {
        const int64_t at = (n * heads + h) * dim + p;
        const float x = in.x.data<float>()[at], g = dy.data<float>()[at];
        float* lambda = adjoint.data() + (h * dim + p) * size;
        const float* st = state + (h * dim + p) * size;
        float dx = params.d.data<float>()[h] * g;
        dd[size_t(h)] += g * x;
        for (int64_t s = 0; s < size; ++s) {
          lambda[s] = g * c[s] + next_decay * lambda[s];
          dc[s] += g * st[s];
          dx += lambda[s] * steps.dt[i] * b[s];
          db[s] += lambda[s] * steps.dt[i] * x;
          ddt[i] += lambda[s] * b[s] * x;
          if (previous) {
            const float decayed = lambda[s] * previous[(h * dim + p) * size + s] * steps.decay[i];
            ddt[i] += decayed * a;
            da[size_t(h)] += decayed * steps.dt[i];
          }
        }
        grad.x.data<float>()[at] = dx;
      }
    }
  }
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = size_t(n * heads + h);
      grad.dt.data<float>()[i] = ddt[i] * steps.slope[i];
      if (dparams.dt_bias.defined()) dparams.dt_bias.data<float>()[h] += ddt[i] * steps.slope[i];
    }
  for (int64_t h = 0; h < heads; ++h) {
    // A = -exp(A_log): dA/dA_log = A.
    if (dparams.a_log.defined()) dparams.a_log.data<float>()[h] += da[size_t(h)] * -std::exp(params.a_log.data<float>()[h]);
    if (dparams.d.defined()) dparams.d.data<float>()[h] += dd[size_t(h)];
  }
  return grad;
}

}  // namespace moetune::ops
