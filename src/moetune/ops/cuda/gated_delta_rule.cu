// The Gated DeltaNet recurrence (ops/gated_delta_rule.h) token by token on the GPU, forward and backward, fp32 inside,
// BF16 in and out. A chunked (WY, tensor-core) form is the later optimisation; this is the recurrent one.
//
// Per value head h and token n, with S [Dk, Dv] and a = exp(g) (0 where the state restarts):
//   u = a·Sᵀk, delta = beta·(v − u), S ← a·S + k ⊗ delta, o = Sᵀq = a·Sᵀq + (k·q)·delta.
// Column j of S needs only k, q, beta, a and v[j], so the state is spread over warps by columns: a lane owns rows
// r + 8m (m < Dk/8, r = lane % 8) of 2 columns, 8 columns a warp; Sᵀk and Sᵀq are sums over the 8 lanes of a column
// (3 shuffle levels) and never leave the warp. Each block walks all N rows of its head serially; tokens are staged
// in shared memory T at a time by 2 producer warps while the others compute the previous tile.
//
// Backward, per token (G = dL/dS after the token, G~ = dL/d(a·S_prev)):
//   G = a_next·G~_next + q ⊗ do, ddelta = Gᵀk, dv = beta·ddelta, du = −beta·ddelta, G~ = G + k ⊗ du,
//   d(normalized k) = G·delta + a·S_prev·du, d(normalized q) = S·do, dbeta = ddelta·(v − u),
//   dg = ⟨G~, a·S_prev⟩ = Σ over the document's rows s ≥ n of (o_s·do_s + du_s·u_s − ddelta_s·delta_s)
// (the last: ⟨G_n, S_n⟩ = o_n·do_n + dg_{n+1} and dg_n = ⟨G_n, S_n⟩ − ddelta·delta + du·u, so no state is needed for
// it). The terms in dL/dk and dL/dq are sums over columns: per-warp partials reduced in shared memory in warp order,
// so every sum has a fixed order and two runs give the same bits (no float atomics anywhere). Five kernels:
//   forward_kernel<for backward> : the forward recurrence saving the state at every 64th row and u per token;
//   reverse_kernel               : rows in reverse carrying G: dv, du (over u), k's G·delta, dbeta, the dg terms;
//   segment_kernel               : one block per 64-row segment from its checkpoint: q's S·do, k's a·S_prev·du, o·do;
//   finish_qk_kernel             : sums over column blocks and value heads of a key head, back through the l2norm;
//   finish_gates_kernel          : dg's reverse sum per document, back through sigmoid / softplus / exp(A_log).
//
// Cost at Qwen3-Next's widths (N = 8192, Hv = 32, Hk = 16, Dk = Dv = 128). One token of one head is ~4·Dk·Dv fp32
// FMA-type operations in the forward (two mat-vec reads of S, its decay and rank-1 update), ~5 in the reverse walk,
// ~7 in the segment kernel: 2.1 GFLOP-ish per 8192·32 tokens·heads per unit, 34 GFLOP forward, ~130 GFLOP backward;
// at ~50 TFLOP/s of fp32 that is 0.7 ms and 2.6 ms of issue, but the walks are serial in N, so what bounds them is
// the latency of one token's step (a chain of ~R FMAs, 3 shuffle levels, the update): ~300 cycles, 8192 tokens,
// ~1.5 ms for the forward (128 blocks of 4 warps: one head's 32 columns each) and ~2-3 ms for the reverse walk
// (32 blocks of 16 warps, one head each, and a shared-memory reduction of the dk partials every 4 tokens). The
// segment kernel is parallel over 128 segments × 32 heads. Bytes: the normalized q, k in fp32 (134 MB, L2-friendly
// since the 2-8 blocks of a key head read them at the same time), v and do once per block; the backward's workspace
// holds the checkpoints (N/64 · Hv · Dk · Dv · 4 = 256 MB), u/du (134 MB) and the dq, dk partials per value head
// (2 · 134 MB): ~800 MB at these widths. Expected: forward ~2 ms, backward ~6-8 ms on an H100.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/gated_delta_rule_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using pointwise::bf16;
using pointwise::from_float;
using pointwise::to_float;
using pointwise::warp_sum;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kSegment = 64;         // rows between the backward's checkpoints (the CPU op's segment too)
constexpr int kForwardTile = 16;     // rows staged at a time by the forward walks
constexpr int kBackwardTile = 4;     // ... by the backward's, whose per-warp row sums take warps·T·Dk floats
constexpr int kProducerWarps = 2;    // warps of a walking block that only stage tiles (and reduce partials)
constexpr int kForwardWarps = 4;     // computing warps of a forward block at most: 32 columns
constexpr int kBackwardWarps = 16;   // ... of a backward block: 128 columns, one partial per 128 columns
constexpr int kWarpCols = 8;         // a lane: rows r + 8m, columns 2c, 2c + 1 of its warp's 8 (lane = 8c + r)
constexpr float kL2NormEps = 1e-6f;  // transformers' l2norm: x · rsqrt(Σ x² + eps)

__host__ __device__ inline int64_t padded_k(int64_t dk) {
  return dk <= 32 ? 32 : dk <= 64 ? 64 : dk <= 128 ? 128 : 256;
}
__host__ __device__ inline int64_t padded_v(int64_t dv) { return (dv + kWarpCols - 1) / kWarpCols * kWarpCols; }
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ inline int warps_for(int most, const GatedDeltaDims& d) {
  return padded_v(d.v_dim) / kWarpCols < most ? int(padded_v(d.v_dim) / kWarpCols) : most;
}
int forward_warps(const GatedDeltaDims& d) { return warps_for(kForwardWarps, d); }
__host__ __device__ inline int backward_warps(const GatedDeltaDims& d) { return warps_for(kBackwardWarps, d); }
// Column blocks of the backward's blocks: one set of dk / dq partials each.
__host__ __device__ inline int64_t backward_parts(const GatedDeltaDims& d) {
  return ceil_div(padded_v(d.v_dim), kWarpCols * backward_warps(d));
}

// The scratch, carved from one workspace.
struct Scratch {
  float *qn, *kn;  // [N, Hk, Dkp]: l2-normalized (q also scaled by Dk^-0.5), zero-padded to Dkp
  float4* tok;     // [N, Hv]: beta, a = exp(g) (0 where the state restarts), q·k, g
  // backward only
  float* checkpoints;  // [N / 64, Hv, Dvp / 8 warps, R · 2 · 32 lanes]: the state entering every 64th row
  float* u;            // [N, Hv, Dvp]: a·S_prevᵀk, overwritten by du in the reverse walk
  float *dq, *dk;      // [parts, N, Hv, Dkp]: d(normalized q / k) per value head and column block
  float *dbeta, *dg;   // [parts, N, Hv]: dbeta, and the per-row terms of dg's reverse sum
};

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

Scratch carve(const GatedDeltaDims& d, void* workspace, bool backward, size_t* bytes) {
  char* base = static_cast<char*>(workspace);
  size_t used = 0;
  auto take = [&](int64_t floats) {
    float* p = base ? reinterpret_cast<float*>(base + used) : nullptr;
    used += align_up(size_t(floats) * sizeof(float));
    return p;
  };
  const int64_t n = d.rows, dkp = padded_k(d.k_dim), dvp = padded_v(d.v_dim), parts = backward_parts(d);
  Scratch s{};
  s.qn = take(n * d.k_heads * dkp);
  s.kn = take(n * d.k_heads * dkp);
  s.tok = reinterpret_cast<float4*>(take(4 * n * d.v_heads));
  if (backward) {
    s.checkpoints = take(ceil_div(n, kSegment) * d.v_heads * dkp * dvp);
    s.u = take(n * d.v_heads * dvp);
    s.dq = take(parts * n * d.v_heads * dkp);
    s.dk = take(parts * n * d.v_heads * dkp);
    s.dbeta = take(parts * n * d.v_heads);
    s.dg = take(parts * n * d.v_heads);
  }
  if (bytes) *bytes = used;
  return s;
}

__device__ __forceinline__ float param(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? to_float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ float bf(const StridedBf16& m, int64_t row, int64_t col) {
  return to_float(static_cast<const bf16*>(m.data)[row * m.ld + col]);
}
__device__ __forceinline__ void put(const StridedBf16& m, int64_t row, int64_t col, float v) {
  static_cast<bf16*>(m.data)[row * m.ld + col] = from_float<bf16>(v);
}
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// torch's softplus (threshold 20) and its slope.
__device__ __forceinline__ float softplus(float u) { return u > 20.0f ? u : log1pf(expf(u)); }
__device__ __forceinline__ float softplus_slope(float u) { return u > 20.0f ? 1.0f : sigmoid(u); }

// ---------------------------------------------------------------------------------------------------------------
// Warp sums of the lane layout (lane = 8c + r: r the row lane, c the column pair)

// Each value summed over the 8 row lanes of its columns; every lane gets the totals.
template <int kN>
__device__ __forceinline__ void sum_over_rows(float (&x)[kN]) {
#pragma unroll
  for (int offset = 1; offset < 8; offset <<= 1)
#pragma unroll
    for (int i = 0; i < kN; ++i) x[i] += __shfl_xor_sync(kFull, x[i], offset);
}

// A per-lane value summed over the warp's 4 column pairs (lanes of one row lane hold the same value otherwise).
__device__ __forceinline__ float sum_over_columns(float x) {
  x += __shfl_xor_sync(kFull, x, 8);
  return x + __shfl_xor_sync(kFull, x, 16);
}

// y[m] (rows r + 8m, this lane's 2 columns summed) summed over the 4 column pairs, scattered: afterwards
// y[0, R/4) holds the totals of rows scattered_row(r, c, m), a quarter of the rows per column pair (3R/4 shuffles
// where an all-reduce would take 2R).
template <int R>
__device__ __forceinline__ void scatter_sum_over_columns(float (&y)[R], int c) {
  const bool high = c & 2, odd = c & 1;
#pragma unroll
  for (int m = 0; m < R / 2; ++m) {
    const float send = high ? y[m] : y[m + R / 2], keep = high ? y[m + R / 2] : y[m];
    y[m] = keep + __shfl_xor_sync(kFull, send, 16);
  }
#pragma unroll
  for (int m = 0; m < R / 4; ++m) {
    const float send = odd ? y[m] : y[m + R / 4], keep = odd ? y[m + R / 4] : y[m];
    y[m] = keep + __shfl_xor_sync(kFull, send, 8);
  }
}
template <int R>
__device__ __forceinline__ int scattered_row(int r, int c, int m) {
  return r + 8 * ((c >> 1) * (R / 2) + (c & 1) * (R / 4) + m);
}

// ---------------------------------------------------------------------------------------------------------------
// Tiles of tokens in shared memory: [T] float4 token scalars, [T, Dkp] normalized k and q, then `columns` operands
// of [T, cb] (the block's columns of v, do, u / du).

struct TileSources {
  const float *qn, *kn;
  const float4* tok;
  StridedBf16 v, dout;   // dout.data null: not staged
  const float* per_col;  // [N, Hv, Dvp] fp32 (u or du), null: not staged
};

__host__ __device__ inline int64_t tile_floats(int tile, int64_t dkp, int64_t cb, int columns) {
  return 4 * tile + 2 * tile * dkp + columns * tile * cb;
}

// Rows [first, first + T) (those past the end read as zeros) staged by threads [0, threads) of the producers.
template <int T, int kDkp>
__device__ void stage_tile(const GatedDeltaDims& d, const TileSources& src, int h, int64_t first, int64_t col0, int cb,
                           float* buffer, int tid, int threads) {
  const int64_t kh = h / (d.v_heads / d.k_heads), dvp = padded_v(d.v_dim);
  float4* tok = reinterpret_cast<float4*>(buffer);
  float4* kq = reinterpret_cast<float4*>(buffer + 4 * T);  // k then q, [2, T, Dkp / 4]
  float* cols = buffer + 4 * T + 2 * T * kDkp;
  for (int t = tid; t < T; t += threads) {
    const int64_t n = first + t;
    tok[t] = n < d.rows ? src.tok[n * d.v_heads + h] : make_float4(0, 0, 0, 0);
  }
  constexpr int kQuads = kDkp / 4, kUnroll = 8;
  for (int base = tid; base < 2 * T * kQuads; base += threads * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = base + u * threads, which = e / (T * kQuads), t = (e / kQuads) % T, x = e % kQuads;
      const int64_t n = first + t;
      const float* from = which == 0 ? src.kn : src.qn;
      v[u] = e < 2 * T * kQuads && n < d.rows ? reinterpret_cast<const float4*>(from + (n * d.k_heads + kh) * kDkp)[x]
                                              : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * threads < 2 * T * kQuads) kq[base + u * threads] = v[u];
  }
  const int columns = 1 + (src.dout.data != nullptr) + (src.per_col != nullptr), count = columns * T * cb;
  for (int base = tid; base < count; base += threads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = base + u * threads, which = e / (T * cb), t = (e / cb) % T, j = e % cb;
      const int64_t n = first + t, col = col0 + j;
      v[u] = 0.0f;
      if (e < count && n < d.rows && col < d.v_dim) {
        if (which == 0)
          v[u] = bf(src.v, n, h * d.v_dim + col);
        else if (which == 1 && src.dout.data)
          v[u] = bf(src.dout, n, h * d.v_dim + col);
        else
          v[u] = src.per_col[(n * d.v_heads + h) * dvp + col];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * threads < count) cols[base + u * threads] = v[u];
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Kernels

// Normalized q and k per (row, key head), one warp each, and the token scalars of the value heads reading them.
// Row 0 restarts the state unless `continue_row0` (a generation state) and starts[0] is clear.
__global__ void prepare_kernel(GatedDeltaDims d, GatedDeltaPointers in, Scratch s, bool continue_row0) {
  gpu::wait_for_previous_kernel();
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= d.rows * d.k_heads) return;
  const int64_t n = warp / d.k_heads, kh = warp % d.k_heads, dkp = padded_k(d.k_dim);
  float q[8], k[8];
  float qq = 0, kk = 0;
  for (int m = 0; m < dkp / 32; ++m) {
    const int64_t i = lane + 32 * m;
    q[m] = i < d.k_dim ? bf(in.q, n, kh * d.k_dim + i) : 0.0f;
    k[m] = i < d.k_dim ? bf(in.k, n, kh * d.k_dim + i) : 0.0f;
    qq += q[m] * q[m];
    kk += k[m] * k[m];
  }
  const float q_scale = rsqrtf(warp_sum(qq) + kL2NormEps) / sqrtf(float(d.k_dim));
  const float k_scale = rsqrtf(warp_sum(kk) + kL2NormEps);
  float dot = 0;
  for (int m = 0; m < dkp / 32; ++m) {
    const int64_t i = lane + 32 * m;
    s.qn[warp * dkp + i] = q[m] * q_scale;
    s.kn[warp * dkp + i] = k[m] * k_scale;
    dot += q[m] * q_scale * (k[m] * k_scale);
  }
  dot = warp_sum(dot);
  const int64_t group = d.v_heads / d.k_heads;
  for (int64_t hh = lane; hh < group; hh += 32) {
    const int64_t h = kh * group + hh;
    const float beta = sigmoid(bf(in.b, n, h));
    const float g =
        -expf(param(in.a_log, in.params_bf16, h)) * softplus(bf(in.a, n, h) + param(in.dt_bias, in.params_bf16, h));
    const bool restart = (in.starts && in.starts[n]) || (n == 0 && !continue_row0);
    s.tok[n * d.v_heads + h] = make_float4(beta, restart ? 0.0f : expf(g), dot, g);
  }
}

// The lane's partial Sᵀk (dots[0, 2)) and Sᵀq (dots[2, 4)) for its 2 columns, before the sum over row lanes;
// per_row(m) runs after row m (for another product of S before the update).
template <int R, typename PerRow>
__device__ __forceinline__ void partial_state_dots(const float (&S)[R][2], const float* k, const float* q, int r,
                                                   float (&dots)[4], PerRow per_row) {
#pragma unroll
  for (int i = 0; i < 4; ++i) dots[i] = 0.0f;
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const float km = k[r + 8 * m], qm = q[r + 8 * m];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      dots[x] = fmaf(S[m][x], km, dots[x]);
      dots[2 + x] = fmaf(S[m][x], qm, dots[2 + x]);
    }
    per_row(m);
  }
}

// S ← a·S + k ⊗ delta; per_row(m) runs after row m is updated.
template <int R, typename PerRow>
__device__ __forceinline__ void update_state(float (&S)[R][2], float a, const float* k, int r, const float (&delta)[2],
                                             PerRow per_row) {
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const float km = k[r + 8 * m];
#pragma unroll
    for (int x = 0; x < 2; ++x) S[m][x] = fmaf(a, S[m][x], km * delta[x]);
    per_row(m);
  }
}

// The state's slot of lane `lane`, element (m, x), in the checkpoint layout (warp-major, coalesced per lane).
template <int R>
__device__ __forceinline__ int64_t checkpoint_index(const GatedDeltaDims& d, int64_t segment, int64_t h, int64_t warp,
                                                    int m, int x, int lane) {
  return (((segment * d.v_heads + h) * (padded_v(d.v_dim) / kWarpCols) + warp) * (R * 2) + m * 2 + x) * 32 + lane;
}

// The forward walk for blocks of (32 columns, value head). Where kForBackward: no output; the state entering every
// 64th row goes to the checkpoints and u per token to s.u (the reverse walk's).
template <int R, bool kForBackward>
__global__ void __launch_bounds__(32 * (kForwardWarps + kProducerWarps))
    forward_kernel(GatedDeltaDims d, GatedDeltaPointers in, StridedBf16 out, Scratch s) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kForwardTile, kDkp = 8 * R;
  extern __shared__ float4 shared4[];
  float* shared = reinterpret_cast<float*>(shared4);
  const int h = blockIdx.y, warps = int(blockDim.x / 32) - kProducerWarps, cb = warps * kWarpCols;
  const int64_t col0 = int64_t(blockIdx.x) * cb, dvp = padded_v(d.v_dim);
  const int64_t buffer = tile_floats(T, kDkp, cb, 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane & 7, c = lane >> 3;
  const bool producer = warp >= warps;
  const int local = warp * kWarpCols + 2 * c;  // the lane's first column in the block
  const int64_t j0 = col0 + local;             // ... in the head
  // A warp past the padded columns (the last block's, where Dv/8 is not a multiple of the block's warps) keeps a
  // zero state and has no checkpoint slot.
  const bool idle = col0 + warp * kWarpCols >= dvp;
  const TileSources src{s.qn, s.kn, s.tok, in.v, StridedBf16{}, nullptr};

  float S[R][2];
#pragma unroll
  for (int m = 0; m < R; ++m)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int64_t i = r + 8 * m, j = j0 + x;
      S[m][x] =
          !kForBackward && in.state && i < d.k_dim && j < d.v_dim ? in.state[(h * d.k_dim + i) * d.v_dim + j] : 0.0f;
    }
  const int64_t tiles = ceil_div(d.rows, T);
  const int ptid = threadIdx.x - warps * 32, pthreads = kProducerWarps * 32;
  if (producer) stage_tile<T, kDkp>(d, src, h, 0, col0, cb, shared, ptid, pthreads);
  __syncthreads();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    if (producer) {
      if (tile + 1 < tiles)
        stage_tile<T, kDkp>(d, src, h, (tile + 1) * T, col0, cb, shared + ((tile + 1) & 1) * buffer, ptid, pthreads);
    } else {
      const float* buf = shared + (tile & 1) * buffer;
      const float4* tok = reinterpret_cast<const float4*>(buf);
      const float *k = buf + 4 * T, *q = k + T * kDkp, *v = q + T * kDkp;
      for (int t = 0; t < T; ++t) {
        const int64_t n = tile * T + t;
        if (n >= d.rows) break;
        if (kForBackward && n % kSegment == 0 && !idle)
#pragma unroll
          for (int m = 0; m < R; ++m)
#pragma unroll
            for (int x = 0; x < 2; ++x)
              s.checkpoints[checkpoint_index<R>(d, n / kSegment, h, col0 / kWarpCols + warp, m, x, lane)] = S[m][x];
        const float4 tk = tok[t];  // beta, a, q·k, g
        float dots[4];             // Sᵀk, Sᵀq for the 2 columns
        partial_state_dots<R>(S, k + t * kDkp, q + t * kDkp, r, dots, [](int) {});
        sum_over_rows(dots);
        float delta[2], o[2], u[2];
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          u[x] = tk.y * dots[x];
          delta[x] = tk.x * (v[t * cb + local + x] - u[x]);
          o[x] = fmaf(tk.y, dots[2 + x], tk.z * delta[x]);
        }
        update_state<R>(S, tk.y, k + t * kDkp, r, delta, [](int) {});
        if (r == 0)
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            if (j0 + x >= d.v_dim) continue;
            if (kForBackward)
              s.u[(n * d.v_heads + h) * dvp + j0 + x] = u[x];
            else
              put(out, n, h * d.v_dim + j0 + x, o[x]);
          }
      }
    }
    __syncthreads();
  }
  if (!kForBackward && in.state && !producer)
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int64_t i = r + 8 * m, j = j0 + x;
        if (i < d.k_dim && j < d.v_dim) in.state[(h * d.k_dim + i) * d.v_dim + j] = S[m][x];
      }
}

// Per-warp partials of a backward tile in shared memory: row sums [warps, T, Dkp] (one or two) and scalars
// [warps, T, 2]; reduced in warp order into the global partials once the tile is done.
template <int T, int kDkp>
struct Partials {
  float *rows0, *rows1, *scalars;
  int warps;

  __device__ Partials(float* base, int warps_, bool two) : warps(warps_) {
    rows0 = base;
    rows1 = base + warps * T * kDkp;
    scalars = base + (two ? 2 : 1) * warps * T * kDkp;
  }
  // This lane's scattered row sums of token t into `rows`.
  template <int R>
  __device__ void put_rows(float* rows, int warp, int t, int r, int c, const float (&y)[R]) const {
#pragma unroll
    for (int m = 0; m < R / 4; ++m) rows[(warp * T + t) * kDkp + scattered_row<R>(r, c, m)] = y[m];
  }
  // Σ over warps of rows[.][t][i] for every (t, i), each handed to take(t, i, total) by one thread of the block.
  template <typename Take>
  __device__ void reduce_rows(const float* rows, Take take) const {
    for (int e = threadIdx.x; e < T * kDkp; e += blockDim.x) {
      float total = 0;
      for (int w = 0; w < warps; ++w) total += rows[w * T * kDkp + e];
      take(e / kDkp, e % kDkp, total);
    }
  }
  template <typename Take>
  __device__ void reduce_scalars(Take take) const {
    for (int e = threadIdx.x; e < 2 * T; e += blockDim.x) {
      float total = 0;
      for (int w = 0; w < warps; ++w) total += scalars[w * 2 * T + e];
      take(e / 2, e % 2, total);
    }
  }
};

__host__ __device__ inline int64_t partial_floats(int tile, int64_t dkp, int warps, bool two) {
  return (two ? 2 : 1) * warps * tile * dkp + 2 * warps * tile;
}

// The reverse walk for blocks of (128 columns, value head), carrying G in registers: dv (written), du (over s.u),
// k's G·delta (s.dk), dbeta and the row's dg terms du·u − ddelta·delta (s.dbeta, s.dg), per column block p.
template <int R>
__global__ void __launch_bounds__(32 * (kBackwardWarps + kProducerWarps))
    reverse_kernel(GatedDeltaDims d, StridedBf16 v, StridedBf16 dout, StridedBf16 dv, Scratch s) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kBackwardTile, kDkp = 8 * R;
  extern __shared__ float4 shared4[];
  float* shared = reinterpret_cast<float*>(shared4);
  const int h = blockIdx.y, p = blockIdx.x, warps = int(blockDim.x / 32) - kProducerWarps, cb = warps * kWarpCols;
  const int64_t col0 = int64_t(p) * cb, dvp = padded_v(d.v_dim);
  const int64_t buffer = tile_floats(T, kDkp, cb, 3);
  const Partials<T, kDkp> partials(shared + 2 * buffer, warps, false);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane & 7, c = lane >> 3;
  const bool producer = warp >= warps;
  const int local = warp * kWarpCols + 2 * c;
  const int64_t j0 = col0 + local;
  const TileSources src{s.qn, s.kn, s.tok, v, dout, s.u};

  float G[R][2];
#pragma unroll
  for (int m = 0; m < R; ++m) G[m][0] = G[m][1] = 0.0f;
  float a_next = 0.0f;  // the decay of the row after: G = a_next · G~ + q ⊗ do
  const int64_t tiles = ceil_div(d.rows, T);
  const int ptid = threadIdx.x - warps * 32, pthreads = kProducerWarps * 32;
  if (producer) stage_tile<T, kDkp>(d, src, h, (tiles - 1) * T, col0, cb, shared, ptid, pthreads);
  __syncthreads();
  for (int64_t tile = tiles - 1, step = 0; tile >= 0; --tile, ++step) {
    if (producer) {
      if (tile > 0)
        stage_tile<T, kDkp>(d, src, h, (tile - 1) * T, col0, cb, shared + ((step + 1) & 1) * buffer, ptid, pthreads);
    } else {
      const float* buf = shared + (step & 1) * buffer;
      const float4* tok = reinterpret_cast<const float4*>(buf);
      const float *k = buf + 4 * T, *q = k + T * kDkp, *vs = q + T * kDkp, *dos = vs + T * cb, *us = dos + T * cb;
      for (int t = T - 1; t >= 0; --t) {
        const int64_t n = tile * T + t;
        if (n >= d.rows) continue;
        const float4 tk = tok[t];
        float dd[2];  // ddelta = Gᵀk
        dd[0] = dd[1] = 0.0f;
#pragma unroll
        for (int m = 0; m < R; ++m) {
          const float km = k[t * kDkp + r + 8 * m], qm = q[t * kDkp + r + 8 * m];
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            G[m][x] = fmaf(a_next, G[m][x], qm * dos[t * cb + local + x]);
            dd[x] = fmaf(G[m][x], km, dd[x]);
          }
        }
        sum_over_rows(dd);
        float delta[2], du[2], dbeta = 0.0f, dg = 0.0f;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const float vx = vs[t * cb + local + x], ux = us[t * cb + local + x];
          delta[x] = tk.x * (vx - ux);
          du[x] = -tk.x * dd[x];
          dbeta = fmaf(dd[x], vx - ux, dbeta);
          dg += du[x] * ux - dd[x] * delta[x];
        }
        if (r == 0)
#pragma unroll
          for (int x = 0; x < 2; ++x)
            if (j0 + x < d.v_dim) {
              put(dv, n, h * d.v_dim + j0 + x, tk.x * dd[x]);
              s.u[(n * d.v_heads + h) * dvp + j0 + x] = du[x];
            }
        dbeta = sum_over_columns(dbeta);
        dg = sum_over_columns(dg);
        if (lane == 0) {
          partials.scalars[(warp * T + t) * 2] = dbeta;
          partials.scalars[(warp * T + t) * 2 + 1] = dg;
        }
        float y[R];  // G·delta
#pragma unroll
        for (int m = 0; m < R; ++m) {
          y[m] = fmaf(G[m][0], delta[0], G[m][1] * delta[1]);
          const float km = k[t * kDkp + r + 8 * m];
#pragma unroll
          for (int x = 0; x < 2; ++x) G[m][x] = fmaf(km, du[x], G[m][x]);
        }
        scatter_sum_over_columns<R>(y, c);
        partials.put_rows<R>(partials.rows0, warp, t, r, c, y);
        a_next = tk.y;
      }
    }
    __syncthreads();
    const int64_t first = tile * T;
    partials.reduce_rows(partials.rows0, [&](int t, int i, float total) {
      if (first + t < d.rows) s.dk[((p * d.rows + first + t) * d.v_heads + h) * kDkp + i] = total;
    });
    partials.reduce_scalars([&](int t, int which, float total) {
      if (first + t < d.rows) (which ? s.dg : s.dbeta)[(p * d.rows + first + t) * d.v_heads + h] = total;
    });
    __syncthreads();
  }
}

// One block per (64-row segment, column block p, value head), from the segment's checkpoint: q's S·do (s.dq), k's
// a·S_prev·du (added to s.dk) and o·do (added to s.dg).
template <int R>
__global__ void __launch_bounds__(32 * (kBackwardWarps + kProducerWarps))
    segment_kernel(GatedDeltaDims d, StridedBf16 v, StridedBf16 dout, Scratch s) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kBackwardTile, kDkp = 8 * R;
  extern __shared__ float4 shared4[];
  float* shared = reinterpret_cast<float*>(shared4);
  const int64_t parts = backward_parts(d), segment = blockIdx.x;
  const int h = int(blockIdx.y / parts), p = int(blockIdx.y % parts);
  const int warps = int(blockDim.x / 32) - kProducerWarps, cb = warps * kWarpCols;
  const int64_t col0 = int64_t(p) * cb;
  const int64_t buffer = tile_floats(T, kDkp, cb, 3);
  const Partials<T, kDkp> partials(shared + 2 * buffer, warps, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane & 7, c = lane >> 3;
  const bool producer = warp >= warps;
  const int local = warp * kWarpCols + 2 * c;
  const TileSources src{s.qn, s.kn, s.tok, v, dout, s.u};

  const bool idle = col0 + warp * kWarpCols >= padded_v(d.v_dim);  // as in forward_kernel: no checkpoint slot
  float S[R][2];
#pragma unroll
  for (int m = 0; m < R; ++m)
#pragma unroll
    for (int x = 0; x < 2; ++x)
      S[m][x] = producer || idle
                    ? 0.0f
                    : s.checkpoints[checkpoint_index<R>(d, segment, h, col0 / kWarpCols + warp, m, x, lane)];
  const int64_t begin = segment * kSegment, end = begin + kSegment < d.rows ? begin + kSegment : d.rows;
  const int64_t tiles = ceil_div(end - begin, T);
  const int ptid = threadIdx.x - warps * 32, pthreads = kProducerWarps * 32;
  if (producer) stage_tile<T, kDkp>(d, src, h, begin, col0, cb, shared, ptid, pthreads);
  __syncthreads();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t first = begin + tile * T;
    if (producer) {
      if (tile + 1 < tiles)
        stage_tile<T, kDkp>(d, src, h, first + T, col0, cb, shared + ((tile + 1) & 1) * buffer, ptid, pthreads);
    } else {
      const float* buf = shared + (tile & 1) * buffer;
      const float4* tok = reinterpret_cast<const float4*>(buf);
      const float *k = buf + 4 * T, *q = k + T * kDkp, *vs = q + T * kDkp, *dos = vs + T * cb, *dus = dos + T * cb;
      for (int t = 0; t < T; ++t) {
        if (first + t >= end) break;
        const float4 tk = tok[t];
        float du[2], dov[2];
#pragma unroll
        for (int x = 0; x < 2; ++x) du[x] = dus[t * cb + local + x], dov[x] = dos[t * cb + local + x];
        float dots[4], y[R];  // y: a·S_prev·du
        partial_state_dots<R>(S, k + t * kDkp, q + t * kDkp, r, dots,
                              [&](int m) { y[m] = tk.y * fmaf(S[m][0], du[0], S[m][1] * du[1]); });
        scatter_sum_over_columns<R>(y, c);
        partials.put_rows<R>(partials.rows1, warp, t, r, c, y);
        sum_over_rows(dots);
        float delta[2], od = 0.0f;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          delta[x] = tk.x * (vs[t * cb + local + x] - tk.y * dots[x]);
          od = fmaf(fmaf(tk.y, dots[2 + x], tk.z * delta[x]), dov[x], od);
        }
        od = sum_over_columns(od);
        if (lane == 0) partials.scalars[(warp * T + t) * 2] = od;
        update_state<R>(S, tk.y, k + t * kDkp, r, delta,
                        [&](int m) { y[m] = fmaf(S[m][0], dov[0], S[m][1] * dov[1]); });  // S·do
        scatter_sum_over_columns<R>(y, c);
        partials.put_rows<R>(partials.rows0, warp, t, r, c, y);
      }
    }
    __syncthreads();
    partials.reduce_rows(partials.rows0, [&](int t, int i, float total) {
      if (first + t < end) s.dq[((p * d.rows + first + t) * d.v_heads + h) * kDkp + i] = total;
    });
    partials.reduce_rows(partials.rows1, [&](int t, int i, float total) {
      if (first + t < end) s.dk[((p * d.rows + first + t) * d.v_heads + h) * kDkp + i] += total;
    });
    partials.reduce_scalars([&](int t, int which, float total) {
      if (which == 0 && first + t < end) s.dg[(p * d.rows + first + t) * d.v_heads + h] += total;
    });
    __syncthreads();
  }
}

// dq and dk per (row, key head), one warp each: the partials summed over column blocks and the value heads reading
// the key head (in that order), then back through the l2norm: dx = scale·(inv·dy − x·inv³·(x·dy)).
__global__ void finish_qk_kernel(GatedDeltaDims d, GatedDeltaPointers in, GatedDeltaGradPointers grads, Scratch s) {
  gpu::wait_for_previous_kernel();
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= d.rows * d.k_heads) return;
  const int64_t n = warp / d.k_heads, kh = warp % d.k_heads, dkp = padded_k(d.k_dim);
  const int64_t group = d.v_heads / d.k_heads, parts = backward_parts(d);
  for (int which = 0; which < 2; ++which) {
    const StridedBf16& x_in = which ? in.k : in.q;
    const float* partial = which ? s.dk : s.dq;
    float x[8], dy[8], squares = 0, dot = 0;
    for (int m = 0; m < dkp / 32; ++m) {
      const int64_t i = lane + 32 * m;
      x[m] = i < d.k_dim ? bf(x_in, n, kh * d.k_dim + i) : 0.0f;
      dy[m] = 0.0f;
      for (int64_t p = 0; p < parts; ++p)
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
          dy[m] += partial[((p * d.rows + n) * d.v_heads + h) * dkp + i];
      squares += x[m] * x[m];
      dot += x[m] * dy[m];
    }
    const float inv = rsqrtf(warp_sum(squares) + kL2NormEps), scale = which ? 1.0f : 1.0f / sqrtf(float(d.k_dim));
    const float radial = warp_sum(dot) * inv * inv * inv;
    for (int m = 0; m < dkp / 32; ++m) {
      const int64_t i = lane + 32 * m;
      if (i < d.k_dim) put(which ? grads.k : grads.q, n, kh * d.k_dim + i, scale * (inv * dy[m] - x[m] * radial));
    }
  }
}

// Per value head, one warp walking the rows backwards 32 at a time: dg = the reverse sum of the dg terms within each
// document (a segmented suffix scan; 0 on a document's first row), then da, db and the parameters' gradients.
__global__ void finish_gates_kernel(GatedDeltaDims d, GatedDeltaPointers in, GatedDeltaGradPointers grads, Scratch s) {
  gpu::wait_for_previous_kernel();
  const int64_t h = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (h >= d.v_heads) return;
  const int64_t parts = backward_parts(d);
  const float a_scale = -expf(param(in.a_log, in.params_bf16, h)), dt_bias = param(in.dt_bias, in.params_bf16, h);
  float carry = 0.0f, d_dt_bias = 0.0f, d_a_log = 0.0f;  // carry: dg of the row after this 32
  for (int64_t chunk = ceil_div(d.rows, 32) - 1; chunk >= 0; --chunk) {
    const int64_t n = chunk * 32 + lane;
    const bool valid = n < d.rows;
    float4 tk = make_float4(0, 0, 0, 0);
    float x = 0.0f, dbeta = 0.0f;
    if (valid) {
      tk = s.tok[n * d.v_heads + h];
      for (int64_t p = 0; p < parts; ++p) {
        x += s.dg[(p * d.rows + n) * d.v_heads + h];
        dbeta += s.dbeta[(p * d.rows + n) * d.v_heads + h];
      }
    }
    // cut: the next row restarts the state (or there is none), so nothing after it reaches this row.
    bool cut = n + 1 >= d.rows || s.tok[(n + 1) * d.v_heads + h].y == 0.0f;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float later = __shfl_down_sync(kFull, x, offset);
      const bool later_cut = __shfl_down_sync(kFull, cut, offset);
      if (lane + offset < 32 && !cut) x += later, cut = later_cut;
    }
    const float dg_here = cut ? x : x + carry;
    carry = __shfl_sync(kFull, dg_here, 0);
    if (!valid) continue;
    const float dg = tk.y == 0.0f ? 0.0f : dg_here;  // a restart (or an underflowed decay) has no state before it
    const float da = dg * a_scale * softplus_slope(bf(in.a, n, h) + dt_bias);
    put(grads.a, n, h, da);
    put(grads.b, n, h, dbeta * tk.x * (1.0f - tk.x));
    d_dt_bias += da;
    d_a_log += dg * tk.w;
  }
  d_dt_bias = warp_sum(d_dt_bias);
  d_a_log = warp_sum(d_a_log);
  if (lane != 0) return;
  auto add = [&](void* out, float value) {
    if (!out) return;
    if (grads.grads_bf16)
      static_cast<bf16*>(out)[h] = from_float<bf16>(to_float(static_cast<bf16*>(out)[h]) + value);
    else
      static_cast<float*>(out)[h] += value;
  };
  add(grads.dt_bias, d_dt_bias);
  add(grads.a_log, d_a_log);
}

// ---------------------------------------------------------------------------------------------------------------
// Launch

struct SharedSizes {
  size_t forward, reverse, segment;
};

SharedSizes shared_sizes(const GatedDeltaDims& d) {
  const int64_t dkp = padded_k(d.k_dim), fw = forward_warps(d), bw = backward_warps(d);
  const size_t f = sizeof(float);
  return {
      size_t(2 * tile_floats(kForwardTile, dkp, 8 * fw, 1)) * f,
      size_t(2 * tile_floats(kBackwardTile, dkp, 8 * bw, 3) + partial_floats(kBackwardTile, dkp, int(bw), false)) * f,
      size_t(2 * tile_floats(kBackwardTile, dkp, 8 * bw, 3) + partial_floats(kBackwardTile, dkp, int(bw), true)) * f};
}

// Calls f(std::integral_constant<int, R>) for the rows per lane R = Dkp / 8 the head dim pads to.
template <typename F>
cudaError_t with_rows_per_lane(int64_t dk, F f) {
  switch (padded_k(dk)) {
    case 32:
      return f(std::integral_constant<int, 4>{});
    case 64:
      return f(std::integral_constant<int, 8>{});
    case 128:
      return f(std::integral_constant<int, 16>{});
    default:
      return f(std::integral_constant<int, 32>{});
  }
}

cudaError_t launch_prepare(const GatedDeltaDims& d, const GatedDeltaPointers& in, const Scratch& s, bool continue_row0,
                           cudaStream_t stream) {
  const unsigned blocks = unsigned(ceil_div(d.rows * d.k_heads, 8));
  return gpu::launch_dependent(prepare_kernel, blocks, 256, 0, stream, d, in, s, continue_row0);
}

template <bool kForBackward>
cudaError_t launch_forward_walk(const GatedDeltaDims& d, const GatedDeltaPointers& in, StridedBf16 out,
                                const Scratch& s, cudaStream_t stream) {
  const int warps = forward_warps(d);
  const dim3 grid(unsigned(ceil_div(padded_v(d.v_dim), 8 * warps)), unsigned(d.v_heads));
  const size_t shared = shared_sizes(d).forward;
  return with_rows_per_lane(d.k_dim, [&](auto rows) {
    auto* kernel = forward_kernel<decltype(rows)::value, kForBackward>;
    const cudaError_t status = gpu::allow_dynamic_shared_memory(kernel);
    if (status != cudaSuccess) return status;
    return gpu::launch_dependent(kernel, grid, 32 * (warps + kProducerWarps), shared, stream, d, in, out, s);
  });
}

}  // namespace

size_t gated_delta_rule_shared_bytes(const GatedDeltaDims& dims) {
  const SharedSizes s = shared_sizes(dims);
  return std::max({s.forward, s.reverse, s.segment});
}

size_t gated_delta_rule_forward_workspace_bytes(const GatedDeltaDims& dims) {
  size_t bytes = 0;
  carve(dims, nullptr, false, &bytes);
  return bytes;
}

size_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaDims& dims) {
  size_t bytes = 0;
  carve(dims, nullptr, true, &bytes);
  return bytes;
}

cudaError_t launch_gated_delta_rule_forward(const GatedDeltaDims& d, const GatedDeltaPointers& in, StridedBf16 out,
                                            void* workspace, cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, false, nullptr);
  cudaError_t status = launch_prepare(d, in, s, in.state != nullptr, stream);
  if (status != cudaSuccess) return status;
  return launch_forward_walk<false>(d, in, out, s, stream);
}

cudaError_t launch_gated_delta_rule_backward(const GatedDeltaDims& d, const GatedDeltaPointers& in, StridedBf16 dout,
                                             const GatedDeltaGradPointers& grads, void* workspace,
                                             cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, true, nullptr);
  GatedDeltaPointers fresh = in;
  fresh.state = nullptr;  // the backward starts row 0 from zeros
  cudaError_t status = launch_prepare(d, fresh, s, false, stream);
  if (status != cudaSuccess) return status;
  if ((status = launch_forward_walk<true>(d, fresh, StridedBf16{}, s, stream)) != cudaSuccess) return status;
  const int warps = backward_warps(d), threads = 32 * (warps + kProducerWarps);
  const unsigned parts = unsigned(backward_parts(d)), heads = unsigned(d.v_heads);
  const SharedSizes shared = shared_sizes(d);
  status = with_rows_per_lane(d.k_dim, [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    cudaError_t st = gpu::allow_dynamic_shared_memory(reverse_kernel<R>);
    if (st != cudaSuccess) return st;
    st = gpu::launch_dependent(reverse_kernel<R>, dim3(parts, heads), threads, shared.reverse, stream, d, in.v, dout,
                               grads.v, s);
    if (st != cudaSuccess) return st;
    if ((st = gpu::allow_dynamic_shared_memory(segment_kernel<R>)) != cudaSuccess) return st;
    return gpu::launch_dependent(segment_kernel<R>, dim3(unsigned(ceil_div(d.rows, kSegment)), parts * heads), threads,
                                 shared.segment, stream, d, in.v, dout, s);
  });
  if (status != cudaSuccess) return status;
  const unsigned qk_blocks = unsigned(ceil_div(d.rows * d.k_heads, 8));
  if ((status = gpu::launch_dependent(finish_qk_kernel, qk_blocks, 256, 0, stream, d, in, grads, s)) != cudaSuccess)
    return status;
  return gpu::launch_dependent(finish_gates_kernel, unsigned(ceil_div(d.v_heads, 4)), 128, 0, stream, d, in, grads, s);
}

}  // namespace moetune::ops::cuda
