// The Gated DeltaNet recurrence (ops/gated_delta_rule.h) token by token on the GPU, forward and backward, fp32 inside,
// BF16 in and out. A chunked (WY, tensor-core) form is the later optimisation; this is the recurrent one.
//
// Per value head h and token n, with S [Dk, Dv] and a = exp(g) (0 where the state restarts):
//   u = a·Sᵀk, delta = beta·(v − u), S ← a·S + k ⊗ delta, o = Sᵀq = a·Sᵀq + (k·q)·delta.
// Column j of S needs only k, q, beta, a and v[j], so the state is spread over warps by columns: a lane owns rows
// r + 8m (m < Dk/8, r = lane % 8) of 2 columns, 8 columns a warp; Sᵀk and Sᵀq are sums over the 8 lanes of a column
// (3 shuffle levels) and never leave the warp. Each block walks the rows of its walk for its (32 columns, head)
// serially; tokens are staged in shared memory T at a time by 4 producer warps while the others compute the previous
// tile. A walk is a span of rows between two document starts (GatedDeltaSplits): the state restarts there, so walks
// run side by side (a micro-batch of 2 sequences halves the walks' time; at most kMaxWalks, balanced by rows).
//
// Backward, per token (G = dL/dS after the token, G~ = dL/d(a·S_prev)):
//   G = a_next·G~_next + q ⊗ do, ddelta = Gᵀk, dv = beta·ddelta, du = −beta·ddelta, G~ = G + k ⊗ du,
//   d(normalized k) = G·delta + a·S_prev·du, d(normalized q) = S·do, dbeta = ddelta·(v − u),
//   dg = ⟨G~, a·S_prev⟩ = Σ over the document's rows s ≥ n of (o_s·do_s + du_s·u_s − ddelta_s·delta_s)
// (the last: ⟨G_n, S_n⟩ = o_n·do_n + dg_{n+1} and dg_n = ⟨G_n, S_n⟩ − ddelta·delta + du·u, so no state is needed for
// it; and o·do = q·(S·do), the row's dq before the l2norm dotted with q, so it needs no sum over columns either).
//
// The only serial chains are S forward and G backward, and column j of G, like column j of S, needs nothing of the
// other columns (ddelta_j = G[:, j]ᵀk, du_j = −beta·ddelta_j). Everything summed over columns (G·delta, S·du, S·do,
// dbeta, the dg terms) is left to a kernel parallel over 64-row segments, which rebuilds S forward from the forward
// walk's checkpoint and G backward from the reverse walk's, given u and ddelta per token (so it sums nothing over
// rows and never waits on a shuffle to go on). Six kernels:
//   prepare_kernel               : normalized q, k and the token scalars (beta, a, q·k, g);
//   forward_kernel<for backward> : S forward, saving S entering every 64th row and u per token;
//   reverse_kernel               : G backward for blocks of (32 columns, value head), like the forward walk: dv and
//                                  ddelta per token, G~ entering (from the end) every 64-row segment; no partials;
//   segment_kernel               : one block per (64-row segment, 128 columns, value head), 16 state rows a warp and
//                                  4 columns a lane: G backward over the segment (G·delta) then S forward over it
//                                  (a·S_prev·du, S·do), row sums over the warp's lanes written straight to the dq / dk
//                                  partials (one per 128 columns; G·delta waits in shared memory for the S pass),
//                                  warp 0 the dbeta and dg terms;
//   finish_qk_kernel             : sums over column blocks and value heads of a key head, back through the l2norm;
//                                  o·do per (row, value head) from the same sums;
//   finish_gates_kernel          : dg's reverse sum per document, back through sigmoid / softplus / exp(A_log).
// Every sum has a fixed order (shuffle trees, loops over parts and heads in index order): two runs give the same
// bits, and no kernel uses float atomics.
//
// Cost at Qwen3-Next's widths (N = 8192 as 2 documents of 4096, Hv = 32, Hk = 16, Dk = Dv = 128), H200 (~1.9 GHz).
// Measured before this design (CUPTI, per call): forward walk 3.88 ms (≈ 900 cycles a token), the old reverse walk
// 27.7 ms (32 blocks of 16 warps, one a head: 3.4 µs ≈ 6.5k cycles a token), the old segment kernel 7.7 ms, finish
// 0.47 ms, prepare 0.09 ms; backward 40.5 ms. Why they were slow: both old kernels staged only 4 tokens a tile, so
// every 4 tokens cost 2 __syncthreads, a 16-warp shared-memory reduction of [16 warps, 4, 128] dk partials (put with
// 4-way bank conflicts) and a producer tile of ~5 dependent global round trips plus runtime integer divisions, on SMSPs
// whose issue the 4 compute warps each already filled (~300 instructions a warp and token: G, Gᵀk, G·delta and its
// scatter over columns). The segment kernel's 4096 blocks of 576 threads ran one a SM (registers), 31 waves, each
// walking its 64 rows at the same ~7k cycles a token as the reverse walk: it was the same latency-bound machine, not
// parallel work. Predicted before this design was run, per call:
//   reverse_kernel: per token and warp ~64 (G update) + 32 (Gᵀk) + 32 (k ⊗ du) FMA-type, ~34 shared loads, 6 shuffles,
//     ~20 others ≈ 190 instructions, one compute warp a SMSP (128 blocks); the chain a token: loads ~30, Gᵀk in two
//     accumulators ~40, 3 shuffle levels ~75, du and the update's head ~20 ≈ 200 cycles; with 16-token tiles and the
//     forward walk's overheads, ≈ 600-800 cycles a token: 2.5-3.5 ms (the forward walk's 3.88 ms has 2 dots, this 1).
//   segment_kernel: per token, warp and pass 4 ops an element of its 16 × 4 block (G pass: update 2, G·delta 1,
//     k ⊗ du 1; S pass: a·S·du 1, update 2, S·do 1) = 512 FMA-type + 3 row sums of 16 shuffles + ~30 selects and
//     adds each + ~25 shared loads ≈ 720 instructions a warp and token, 8 warps a (token, head): 5.8k; 1986
//     (token, head) steps a SM / 4 SMSPs → 2.9M issue cycles ≈ 1.5 ms at full issue; 2 blocks a SM (16 warps) and
//     restaging each 16-token tile per pass: ≈ 2-2.5 ms.
//   forward walk 3.9 ms (unchanged but for the checkpoints' layout), prepare 0.1 ms, finish ~0.5 ms.
//   Backward ≈ 0.1 + 3.9 + ~3 + ~2.3 + 0.5 ≈ 10 ms (was 40.5 ms); forward 3.8 ms as before.
// Measured (H200, session 40, GatedDeltaRuleGpu.DISABLED_QwenNextWidths): backward 12.6 ms, forward 4.05 ms. Split
// (H100, session 41, one walk): forward walk 3.9 ms, reverse walk 4.0, segment kernel 3.7, finish 0.9, prepare 0.1.
// With the two documents' walks side by side (Walks): forward 2.26 ms, backward 9.11 (walks 2.1 and 2.3 ms).
// The walks were waiting on their producers (session 42, H100, CUPTI): 2 producer warps staged a 16-row tile in ~3
// dependent rounds of global loads (8 in flight a thread), slower than the 4 computing warps used it. Measured per
// call, one walk / two walks, forward and backward: 2 producers and 16-row tiles 3.98 / 2.27 and 12.54 / 9.11 ms;
// 4 producers 2.81 / 1.91 and 10.61 / 8.76; 4 producers and 32-row tiles (kept) 2.76 / 1.85 and 10.48 / 8.63;
// 8 producers 2.83 / 2.83 (two walks no faster: 12-warp blocks fit one a SM) and 10.87 / 10.88; 16 loads in flight a
// thread 3.19 / 2.12 and 11.24 / 9.15 (and the segment kernel 3.68 → 3.90 ms). The segment kernel (3.68 ms) is the
// backward's largest part now. Issuing the forward walk's 12 shuffles a level at a time (sum_over_rows) alone
// changed nothing measurable (2.27 → 2.23 ms). The tiles' columns staged 4 at a time (stage_tile: one 8-byte load of
// 4 BF16 values, one float4 of the fp32 ones, where there were 4 scalar loads) took the segment kernel 3.68 → 2.88 ms:
// two walks 1.85 → 1.79 forward, 8.63 → 7.72 backward; one walk 2.76 → 2.61 and 10.48 → 9.55 (same call, H100).
// Workspace of the backward: normalized q, k (134 MB), token scalars (4 MB), S and G checkpoints (2 × 268 MB), u and
// ddelta (2 × 134 MB), dq and dk partials (2 × 134 MB), dbeta, dg, o·do (3 MB): ~1.21 GB (was ~0.81 GB).
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
constexpr int kWalkTile = 32;        // rows staged at a time by the forward and reverse walks
constexpr int kSegmentTile = 16;     // ... by the segment kernel
constexpr int kProducerWarps = 4;    // warps of a walking block that only stage tiles
constexpr int kWalkWarps = 4;        // computing warps of a walking block at most: 32 columns
constexpr int kWarpCols = 8;         // a lane: rows r + 8m, columns 2c, 2c + 1 of its warp's 8 (lane = 8c + r)
constexpr int kSegmentCols = 128;    // columns of a segment block: 4 a lane; one dq / dk partial per 128 columns
constexpr int kSegmentRows = 16;     // state rows of a segment block's warp: Dkp / 16 warps
constexpr float kL2NormEps = 1e-6f;  // transformers' l2norm: x · rsqrt(Σ x² + eps)
// Walks side by side at most: (value heads × column blocks) blocks each, 128 at Qwen3-Next's widths, so 8 walks
// fill the H200's 132 SMs ~4 blocks deep; more would only queue.
constexpr int kMaxWalks = 8;

// The walks: walk w covers rows [first[w], first[w + 1]).
struct Walks {
  int count = 1;
  int64_t first[kMaxWalks + 1] = {};
};

__host__ __device__ inline int64_t padded_k(int64_t dk) {
  return dk <= 32 ? 32 : dk <= 64 ? 64 : dk <= 128 ? 128 : 256;
}
__host__ __device__ inline int64_t padded_v(int64_t dv) { return (dv + kWarpCols - 1) / kWarpCols * kWarpCols; }
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Computing warps of a walking block (forward and reverse): 8 columns each, 4 at most.
int walk_warps(const GatedDeltaDims& d) {
  return padded_v(d.v_dim) / kWarpCols < kWalkWarps ? int(padded_v(d.v_dim) / kWarpCols) : kWalkWarps;
}
// Column blocks of the segment kernel: one set of dq / dk / dbeta / dg partials each.
__host__ __device__ inline int64_t backward_parts(const GatedDeltaDims& d) {
  return ceil_div(padded_v(d.v_dim), kSegmentCols);
}

// The scratch, carved from one workspace.
struct Scratch {
  float *qn, *kn;  // [N, Hk, Dkp]: l2-normalized (q also scaled by Dk^-0.5), zero-padded to Dkp
  float4* tok;     // [N, Hv]: beta, a = exp(g) (0 where the state restarts), q·k, g
  // backward only
  float* checkpoints;   // [N / 64, Hv, Dkp, Dvp]: S entering every 64th row (the forward walk's)
  float* gcheckpoints;  // [N / 64, Hv, Dkp, Dvp]: G~ entering each segment from its end (the reverse walk's)
  float *u, *dd;        // [N, Hv, Dvp]: a·S_prevᵀk and ddelta = Gᵀk per token
  float *dq, *dk;       // [parts, N, Hv, Dkp]: d(normalized q / k) per value head and 128-column block
  float *dbeta, *dg;    // [parts, N, Hv]: dbeta, and the per-row terms du·u − ddelta·delta of dg's reverse sum
  float* odo;           // [N, Hv]: o·do, dg's last per-row term (finish_qk_kernel's)
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
    s.gcheckpoints = take(ceil_div(n, kSegment) * d.v_heads * dkp * dvp);
    s.u = take(n * d.v_heads * dvp);
    s.dd = take(n * d.v_heads * dvp);
    s.dq = take(parts * n * d.v_heads * dkp);
    s.dk = take(parts * n * d.v_heads * dkp);
    s.dbeta = take(parts * n * d.v_heads);
    s.dg = take(parts * n * d.v_heads);
    s.odo = take(n * d.v_heads);
  }
  if (bytes) *bytes = used;
  return s;
}

// The checkpoints' slot of (segment, head, row, column).
__device__ __forceinline__ int64_t checkpoint_index(const GatedDeltaDims& d, int64_t segment, int64_t h, int64_t row,
                                                    int64_t col, int64_t dkp) {
  return ((segment * d.v_heads + h) * dkp + row) * padded_v(d.v_dim) + col;
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
// Warp sums

// Each value summed over the 8 row lanes of its columns (lane = 8c + r); every lane gets the totals.
// All kN shuffles of a level are issued before its adds: written as x[i] += shfl(x[i]), ptxas gave every shuffle the
// same destination register, so each waited for the add before it (12 shuffles back to back in the forward walk; no
// measurable cost while the walks waited on their tiles; by the instruction count ~330 cycles a token once they do
// not).
template <int kN>
__device__ __forceinline__ void sum_over_rows(float (&x)[kN]) {
#pragma unroll
  for (int offset = 1; offset < 8; offset <<= 1) {
    float other[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) other[i] = __shfl_xor_sync(kFull, x[i], offset);
#pragma unroll
    for (int i = 0; i < kN; ++i) x[i] += other[i];
  }
}

// One level of the halving exchange below: lanes across `kHalf · 2` apart swap halves of the rows they still hold.
template <int kHalf>
__device__ __forceinline__ void exchange_half_rows(float (&y)[16], int lane) {
  const bool upper = lane & (2 * kHalf);  // keeps rows [kHalf, 2·kHalf) of what is left
#pragma unroll
  for (int m = 0; m < kHalf; ++m) {
    const float send = upper ? y[m] : y[m + kHalf], keep = upper ? y[m + kHalf] : y[m];
    y[m] = keep + __shfl_xor_sync(kFull, send, 2 * kHalf);
  }
}

// y[i]: this lane's part of 16 row sums. Returns the sum over the warp's 32 lanes of row lane / 2 (lanes 2i and
// 2i + 1 both get row i's, the same bits): a halving exchange, 8 + 4 + 2 + 1 + 1 shuffles for the 16 rows.
__device__ __forceinline__ float sum_16_rows_over_lanes(float (&y)[16], int lane) {
  exchange_half_rows<8>(y, lane);  // lanes 16 apart: rows 8·(lane bit 4) + [0, 8) left
  exchange_half_rows<4>(y, lane);  // 8 apart: + 4·(bit 3)
  exchange_half_rows<2>(y, lane);  // 4 apart: + 2·(bit 2)
  exchange_half_rows<1>(y, lane);  // 2 apart: + (bit 1), so row lane / 2
  return y[0] + __shfl_xor_sync(kFull, y[0], 1);
}

// ---------------------------------------------------------------------------------------------------------------
// Tiles of tokens in shared memory: [T] float4 token scalars, [T, Dkp] normalized k and q, then `columns` operands
// of [T, cb] (the block's columns of its BF16 operands, then of its fp32 ones).

struct TileSources {
  const float *qn, *kn;
  const float4* tok;
  StridedBf16 bf[2];    // [N, Hv·Dv] (v, dout), data null: absent; present ones first
  const float* f32[2];  // [N, Hv, Dvp] (u, ddelta), null: absent; present ones first
};

__host__ __device__ inline int64_t tile_floats(int tile, int64_t dkp, int64_t cb, int columns) {
  return 4 * tile + 2 * tile * dkp + columns * tile * cb;
}

// Rows [first, first + T) (those past the end read as zeros, and columns past Dv) staged by threads [0, threads).
// kCb: the block's columns where known at compile time (0: cb).
template <int T, int kDkp, int kCb = 0>
__device__ __forceinline__ void stage_tile(const GatedDeltaDims& d, const TileSources& src, int h, int64_t first,
                                           int64_t col0, int cb_runtime, float* buffer, int tid, int threads) {
  const int cb = kCb > 0 ? kCb : cb_runtime;
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
  // The columns 4 at a time (cb and col0 are multiples of 4): one 8-byte load of 4 BF16 values where the operand's
  // row allows it (pointer, stride and head offset multiples of 4 elements), one float4 of the fp32 ones (Dvp is a
  // multiple of 8); element by element at Dv's end or where unaligned.
  const int bf_columns = (src.bf[0].data != nullptr) + (src.bf[1].data != nullptr);
  const int columns = bf_columns + (src.f32[0] != nullptr) + (src.f32[1] != nullptr), groups = columns * T * cb / 4;
  constexpr int kGroupUnroll = 4;
  for (int base = tid; base < groups; base += threads * kGroupUnroll) {
    float4 v[kGroupUnroll];
#pragma unroll
    for (int u = 0; u < kGroupUnroll; ++u) {
      const int g = base + u * threads, e = 4 * g, which = e / (T * cb), t = (e / cb) % T, j = e % cb;
      const int64_t n = first + t, col = col0 + j;
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (g < groups && n < d.rows) {
        if (which < bf_columns) {
          const StridedBf16 m = which == 0 ? src.bf[0] : src.bf[1];
          const int64_t at = n * m.ld + h * d.v_dim + col;
          const bf16* row = static_cast<const bf16*>(m.data);
          if (col + 3 < d.v_dim && at % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 8 == 0) {
            const uint2 raw = *reinterpret_cast<const uint2*>(row + at);  // bf16 is fp32's upper half
            x[0] = __uint_as_float(raw.x << 16), x[1] = __uint_as_float(raw.x & 0xffff0000u);
            x[2] = __uint_as_float(raw.y << 16), x[3] = __uint_as_float(raw.y & 0xffff0000u);
          } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (col + i < d.v_dim) x[i] = to_float(row[at + i]);
          }
        } else {
          const float* f = (which == bf_columns ? src.f32[0] : src.f32[1]) + (n * d.v_heads + h) * dvp + col;
          if (col + 3 < d.v_dim) {
            const float4 q4 = *reinterpret_cast<const float4*>(f);
            x[0] = q4.x, x[1] = q4.y, x[2] = q4.z, x[3] = q4.w;
          } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (col + i < d.v_dim) x[i] = f[i];
          }
        }
      }
      v[u] = make_float4(x[0], x[1], x[2], x[3]);
    }
#pragma unroll
    for (int u = 0; u < kGroupUnroll; ++u)
      if (base + u * threads < groups) reinterpret_cast<float4*>(cols)[base + u * threads] = v[u];
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

// The forward walk for blocks of (32 columns, value head). Where kForBackward: no output; the state entering every
// 64th row goes to the checkpoints and u per token to s.u (the segment kernel's).
template <int R, bool kForBackward>
__global__ void __launch_bounds__(32 * (kWalkWarps + kProducerWarps))
    forward_kernel(GatedDeltaDims d, GatedDeltaPointers in, StridedBf16 out, Scratch s, Walks walks) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kWalkTile, kDkp = 8 * R;
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
  const TileSources src{s.qn, s.kn, s.tok, {in.v, StridedBf16{}}, {nullptr, nullptr}};

  // A generation state is given only with one walk (launch_gated_delta_rule_forward), which then starts from it.
  float S[R][2];
#pragma unroll
  for (int m = 0; m < R; ++m)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int64_t i = r + 8 * m, j = j0 + x;
      S[m][x] =
          !kForBackward && in.state && i < d.k_dim && j < d.v_dim ? in.state[(h * d.k_dim + i) * d.v_dim + j] : 0.0f;
    }
  const int64_t first = walks.first[blockIdx.z], end = walks.first[blockIdx.z + 1];
  const int64_t tiles = ceil_div(end - first, T);
  const int ptid = threadIdx.x - warps * 32, pthreads = kProducerWarps * 32;
  if (producer) stage_tile<T, kDkp>(d, src, h, first, col0, cb, shared, ptid, pthreads);
  __syncthreads();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    if (producer) {
      if (tile + 1 < tiles)
        stage_tile<T, kDkp>(d, src, h, first + (tile + 1) * T, col0, cb, shared + ((tile + 1) & 1) * buffer, ptid,
                            pthreads);
    } else {
      const float* buf = shared + (tile & 1) * buffer;
      const float4* tok = reinterpret_cast<const float4*>(buf);
      const float *k = buf + 4 * T, *q = k + T * kDkp, *v = q + T * kDkp;
      for (int t = 0; t < T; ++t) {
        const int64_t n = first + tile * T + t;
        if (n >= end) break;
        if (kForBackward && n % kSegment == 0 && !idle)
#pragma unroll
          for (int m = 0; m < R; ++m)
            *reinterpret_cast<float2*>(s.checkpoints + checkpoint_index(d, n / kSegment, h, r + 8 * m, j0, kDkp)) =
                make_float2(S[m][0], S[m][1]);
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

// The reverse walk for blocks of (32 columns, value head), the forward walk's shape, carrying G~ in registers:
// ddelta = Gᵀk per token (s.dd) and dv = beta·ddelta; G~ entering each 64-row segment from its end (its last row's,
// or the last row's: zeros) goes to s.gcheckpoints. Columns are independent, so nothing is summed across warps.
template <int R>
__global__ void __launch_bounds__(32 * (kWalkWarps + kProducerWarps))
    reverse_kernel(GatedDeltaDims d, StridedBf16 dout, StridedBf16 dv, Scratch s, Walks walks) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kWalkTile, kDkp = 8 * R;
  extern __shared__ float4 shared4[];
  float* shared = reinterpret_cast<float*>(shared4);
  const int h = blockIdx.y, warps = int(blockDim.x / 32) - kProducerWarps, cb = warps * kWarpCols;
  const int64_t col0 = int64_t(blockIdx.x) * cb, dvp = padded_v(d.v_dim);
  const int64_t buffer = tile_floats(T, kDkp, cb, 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane & 7, c = lane >> 3;
  const bool producer = warp >= warps;
  const int local = warp * kWarpCols + 2 * c;
  const int64_t j0 = col0 + local;
  const bool idle = col0 + warp * kWarpCols >= dvp;
  const TileSources src{s.qn, s.kn, s.tok, {dout, StridedBf16{}}, {nullptr, nullptr}};

  float G[R][2];
#pragma unroll
  for (int m = 0; m < R; ++m) G[m][0] = G[m][1] = 0.0f;
  // The decay of the row after: G = a_next · G~ + q ⊗ do. Past the walk's end it is 0: the next walk's first row
  // restarts the state, so nothing of its G reaches this walk.
  float a_next = 0.0f;
  const int64_t first = walks.first[blockIdx.z], end = walks.first[blockIdx.z + 1];
  const int64_t tiles = ceil_div(end - first, T);
  const int ptid = threadIdx.x - warps * 32, pthreads = kProducerWarps * 32;
  if (producer) stage_tile<T, kDkp>(d, src, h, first + (tiles - 1) * T, col0, cb, shared, ptid, pthreads);
  __syncthreads();
  for (int64_t tile = tiles - 1, step = 0; tile >= 0; --tile, ++step) {
    if (producer) {
      if (tile > 0)
        stage_tile<T, kDkp>(d, src, h, first + (tile - 1) * T, col0, cb, shared + ((step + 1) & 1) * buffer, ptid,
                            pthreads);
    } else {
      const float* buf = shared + (step & 1) * buffer;
      const float4* tok = reinterpret_cast<const float4*>(buf);
      const float *k = buf + 4 * T, *q = k + T * kDkp, *dos = q + T * kDkp;
      for (int t = T - 1; t >= 0; --t) {
        const int64_t n = first + tile * T + t;
        if (n >= end) continue;
        if ((n % kSegment == kSegment - 1 || n == d.rows - 1) && !idle)
#pragma unroll
          for (int m = 0; m < R; ++m)
            *reinterpret_cast<float2*>(s.gcheckpoints + checkpoint_index(d, n / kSegment, h, r + 8 * m, j0, kDkp)) =
                make_float2(G[m][0], G[m][1]);
        const float4 tk = tok[t];
        const float do0 = dos[t * cb + local], do1 = dos[t * cb + local + 1];
        float dd[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // Gᵀk, rows of even and odd m (two shorter chains)
#pragma unroll
        for (int m = 0; m < R; ++m) {
          const float km = k[t * kDkp + r + 8 * m], qm = q[t * kDkp + r + 8 * m];
          G[m][0] = fmaf(a_next, G[m][0], qm * do0);
          G[m][1] = fmaf(a_next, G[m][1], qm * do1);
          dd[m & 1][0] = fmaf(G[m][0], km, dd[m & 1][0]);
          dd[m & 1][1] = fmaf(G[m][1], km, dd[m & 1][1]);
        }
        float total[2] = {dd[0][0] + dd[1][0], dd[0][1] + dd[1][1]};
        sum_over_rows(total);
        const float du0 = -tk.x * total[0], du1 = -tk.x * total[1];
        if (r == 0)
#pragma unroll
          for (int x = 0; x < 2; ++x)
            if (j0 + x < d.v_dim) {
              put(dv, n, h * d.v_dim + j0 + x, tk.x * total[x]);
              s.dd[(n * d.v_heads + h) * dvp + j0 + x] = total[x];
            }
#pragma unroll
        for (int m = 0; m < R; ++m) {
          const float km = k[t * kDkp + r + 8 * m];
          G[m][0] = fmaf(km, du0, G[m][0]);
          G[m][1] = fmaf(km, du1, G[m][1]);
        }
        a_next = tk.y;
      }
    }
    __syncthreads();
  }
}

// One block per (64-row segment, 128-column block p, value head): 16 state rows a warp (Dkp / 16 warps), 4 columns
// a lane (4·lane + x), so every sum over columns stays in the warp and nothing is summed across warps. First G
// backward over the segment from s.gcheckpoints (G_n = a_next·G~ + q ⊗ do, k's G·delta kept in shared memory,
// G~ = G + k ⊗ du), then S forward from s.checkpoints (k's G·delta + a·S_prev·du into s.dk by the thread that kept
// the first; S ← a·S + k ⊗ delta; q's S·do into s.dq); warp 0 writes the block's share of dbeta and of the dg terms
// du·u − ddelta·delta. delta = beta·(v − u) and du = −beta·ddelta come from the walks' u and ddelta, so neither pass
// sums over rows.
template <int R>
__global__ void __launch_bounds__(16 * R, R <= 16 ? 2 : 1)
    segment_kernel(GatedDeltaDims d, StridedBf16 v, StridedBf16 dout, Scratch s) {
  gpu::wait_for_previous_kernel();
  constexpr int T = kSegmentTile, kDkp = 8 * R, kCols = kSegmentCols;
  extern __shared__ float4 shared4[];
  float* shared = reinterpret_cast<float*>(shared4);
  const int64_t parts = backward_parts(d), segment = blockIdx.x, dvp = padded_v(d.v_dim);
  const int h = int(blockIdx.y / parts), p = int(blockIdx.y % parts);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kSegmentRows;
  const int64_t col0 = int64_t(p) * kCols, col = col0 + 4 * lane;  // the lane's first column in the head
  const bool has_cols = col < dvp;                                 // Dvp is a multiple of 8: all 4 or none
  const int64_t begin = segment * kSegment, end = begin + kSegment < d.rows ? begin + kSegment : d.rows;
  const int tiles = int(ceil_div(end - begin, T));
  const TileSources src{s.qn, s.kn, s.tok, {v, dout}, {s.u, s.dd}};
  const float4* tok = reinterpret_cast<const float4*>(shared);
  const float *k = shared + 4 * T, *q = k + T * kDkp, *cols = q + T * kDkp;  // cols: v, do, u, ddelta [4, T, 128]
  float* g_delta = shared + tile_floats(T, kDkp, kCols, 4);  // [64, Dkp]: k's G·delta of the segment's rows
  const int64_t slot = checkpoint_index(d, segment, h, row0, col, kDkp);  // (row0, col); rows Dvp apart
  // The row whose totals this lane writes (lanes 2i and 2i + 1 hold row i's; the even one writes).
  const int64_t out_row = row0 + (lane >> 1);
  const bool writer = (lane & 1) == 0;
  auto column4 = [&](int which, int t) {
    return reinterpret_cast<const float4*>(cols + (which * T + t) * kCols)[lane];
  };
  auto rows16 = [&](const float* x, int t, float(&out)[16]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(x + t * kDkp + row0)[i];
      out[4 * i] = f.x, out[4 * i + 1] = f.y, out[4 * i + 2] = f.z, out[4 * i + 3] = f.w;
    }
  };
  auto load_state = [&](const float* from, float(&X)[16][4]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float4 f =
          has_cols ? *reinterpret_cast<const float4*>(from + slot + int64_t(i) * dvp) : make_float4(0, 0, 0, 0);
      X[i][0] = f.x, X[i][1] = f.y, X[i][2] = f.z, X[i][3] = f.w;
    }
  };

  {  // G backward over the segment
    float G[16][4];
    load_state(s.gcheckpoints, G);
    float a_next = end < d.rows ? s.tok[end * d.v_heads + h].y : 0.0f;
    for (int tile = tiles - 1; tile >= 0; --tile) {
      const int64_t first = begin + int64_t(tile) * T;
      __syncthreads();  // the previous tile's readers are done
      stage_tile<T, kDkp, kCols>(d, src, h, first, col0, kCols, shared, threadIdx.x, blockDim.x);
      __syncthreads();
      for (int t = T - 1; t >= 0; --t) {
        const int64_t n = first + t;
        if (n >= end) continue;
        const float4 tk = tok[t], vv = column4(0, t), dov = column4(1, t), uv = column4(2, t), ddv = column4(3, t);
        const float vx[4] = {vv.x, vv.y, vv.z, vv.w}, dox[4] = {dov.x, dov.y, dov.z, dov.w};
        const float ux[4] = {uv.x, uv.y, uv.z, uv.w}, ddx[4] = {ddv.x, ddv.y, ddv.z, ddv.w};
        float delta[4], du[4], qr[16], kr[16], y[16];
#pragma unroll
        for (int x = 0; x < 4; ++x) delta[x] = tk.x * (vx[x] - ux[x]), du[x] = -tk.x * ddx[x];
        rows16(q, t, qr);
        rows16(k, t, kr);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
#pragma unroll
          for (int x = 0; x < 4; ++x) G[i][x] = fmaf(a_next, G[i][x], qr[i] * dox[x]);
          y[i] = fmaf(G[i][0], delta[0], fmaf(G[i][1], delta[1], fmaf(G[i][2], delta[2], G[i][3] * delta[3])));
        }
        const float total = sum_16_rows_over_lanes(y, lane);
        if (writer) g_delta[(n - begin) * kDkp + out_row] = total;  // read back by this thread in the S pass
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int x = 0; x < 4; ++x) G[i][x] = fmaf(kr[i], du[x], G[i][x]);
        a_next = tk.y;
      }
    }
  }
  {  // S forward over the segment
    float S[16][4];
    load_state(s.checkpoints, S);
    for (int tile = 0; tile < tiles; ++tile) {
      const int64_t first = begin + int64_t(tile) * T;
      __syncthreads();
      stage_tile<T, kDkp, kCols>(d, src, h, first, col0, kCols, shared, threadIdx.x, blockDim.x);
      __syncthreads();
      for (int t = 0; t < T; ++t) {
        const int64_t n = first + t;
        if (n >= end) break;
        const float4 tk = tok[t], vv = column4(0, t), dov = column4(1, t), uv = column4(2, t), ddv = column4(3, t);
        const float vx[4] = {vv.x, vv.y, vv.z, vv.w}, dox[4] = {dov.x, dov.y, dov.z, dov.w};
        const float ux[4] = {uv.x, uv.y, uv.z, uv.w}, ddx[4] = {ddv.x, ddv.y, ddv.z, ddv.w};
        float delta[4], du[4], kr[16], y[16];
#pragma unroll
        for (int x = 0; x < 4; ++x) delta[x] = tk.x * (vx[x] - ux[x]), du[x] = -tk.x * ddx[x];
        if (warp == 0) {  // the block's columns' share of dbeta and of dg's per-row terms
          float dbeta = 0.0f, dg = 0.0f;
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            dbeta = fmaf(ddx[x], vx[x] - ux[x], dbeta);
            dg += du[x] * ux[x] - ddx[x] * delta[x];
          }
          dbeta = warp_sum(dbeta);
          dg = warp_sum(dg);
          if (lane == 0) {
            s.dbeta[(p * d.rows + n) * d.v_heads + h] = dbeta;
            s.dg[(p * d.rows + n) * d.v_heads + h] = dg;
          }
        }
#pragma unroll
        for (int i = 0; i < 16; ++i)
          y[i] = tk.y * fmaf(S[i][0], du[0], fmaf(S[i][1], du[1], fmaf(S[i][2], du[2], S[i][3] * du[3])));
        const float s_du = sum_16_rows_over_lanes(y, lane);  // a·S_prev·du
        if (writer)
          s.dk[((p * d.rows + n) * d.v_heads + h) * kDkp + out_row] = g_delta[(n - begin) * kDkp + out_row] + s_du;
        rows16(k, t, kr);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
#pragma unroll
          for (int x = 0; x < 4; ++x) S[i][x] = fmaf(tk.y, S[i][x], kr[i] * delta[x]);
          y[i] = fmaf(S[i][0], dox[0], fmaf(S[i][1], dox[1], fmaf(S[i][2], dox[2], S[i][3] * dox[3])));
        }
        const float s_do = sum_16_rows_over_lanes(y, lane);  // S·do
        if (writer) s.dq[((p * d.rows + n) * d.v_heads + h) * kDkp + out_row] = s_do;
      }
    }
  }
}

// dq and dk per (row, key head), one warp each: the partials summed over value heads reading the key head and, per
// head, over column blocks (in that order), then back through the l2norm: dx = scale·(inv·dy − x·inv³·(x·dy)). On
// the way, o·do per value head = q·(S·do) (the normalized q's dot with that head's dq before the l2norm) into s.odo.
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
      squares += x[m] * x[m];
    }
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      float od = 0.0f;
      for (int m = 0; m < dkp / 32; ++m) {
        const int64_t i = lane + 32 * m;
        float head = 0.0f;
        for (int64_t p = 0; p < parts; ++p) head += partial[((p * d.rows + n) * d.v_heads + h) * dkp + i];
        dy[m] += head;
        if (which == 0) od = fmaf(s.qn[warp * dkp + i], head, od);
      }
      if (which == 0) {
        od = warp_sum(od);
        if (lane == 0) s.odo[n * d.v_heads + h] = od;
      }
    }
    for (int m = 0; m < dkp / 32; ++m) dot += x[m] * dy[m];
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
      x += s.odo[n * d.v_heads + h];
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
  size_t walk, segment;  // the forward and reverse walks (one column operand each), the segment kernel
};

SharedSizes shared_sizes(const GatedDeltaDims& d) {
  const int64_t dkp = padded_k(d.k_dim), ww = walk_warps(d);
  const size_t f = sizeof(float);
  return {size_t(2 * tile_floats(kWalkTile, dkp, kWarpCols * ww, 1)) * f,
          size_t(tile_floats(kSegmentTile, dkp, kSegmentCols, 4) + kSegment * dkp) * f};
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

// The walks over the splits' rows: cut at the first split row that leaves the current walk at least
// ceil(N / (kMaxWalks − 1)) rows long, so at most kMaxWalks walks, of similar lengths where the splits allow.
Walks plan_walks(int64_t rows, GatedDeltaSplits splits) {
  Walks walks;
  const int64_t least = ceil_div(rows, kMaxWalks - 1);
  for (int64_t i = 0; i < splits.count; ++i) {
    const int64_t row = splits.rows[i];
    if (row > walks.first[walks.count - 1] && row < rows && row - walks.first[walks.count - 1] >= least &&
        walks.count < kMaxWalks)
      walks.first[walks.count++] = row;
  }
  walks.first[walks.count] = rows;
  return walks;
}

// The walks' grid: (32-column blocks, value heads, walks), the computing warps and the producers.
dim3 walk_grid(const GatedDeltaDims& d, const Walks& walks) {
  return dim3(unsigned(ceil_div(padded_v(d.v_dim), kWarpCols * walk_warps(d))), unsigned(d.v_heads),
              unsigned(walks.count));
}
unsigned walk_threads(const GatedDeltaDims& d) { return unsigned(32 * (walk_warps(d) + kProducerWarps)); }

template <bool kForBackward>
cudaError_t launch_forward_walk(const GatedDeltaDims& d, const GatedDeltaPointers& in, StridedBf16 out,
                                const Scratch& s, const Walks& walks, cudaStream_t stream) {
  const size_t shared = shared_sizes(d).walk;
  return with_rows_per_lane(d.k_dim, [&](auto rows) {
    auto* kernel = forward_kernel<decltype(rows)::value, kForBackward>;
    const cudaError_t status = gpu::allow_dynamic_shared_memory(kernel);
    if (status != cudaSuccess) return status;
    return gpu::launch_dependent(kernel, walk_grid(d, walks), walk_threads(d), shared, stream, d, in, out, s, walks);
  });
}

}  // namespace

size_t gated_delta_rule_shared_bytes(const GatedDeltaDims& dims) {
  const SharedSizes s = shared_sizes(dims);
  return std::max(s.walk, s.segment);
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
                                            GatedDeltaSplits splits, void* workspace, cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, false, nullptr);
  cudaError_t status = launch_prepare(d, in, s, in.state != nullptr, stream);
  if (status != cudaSuccess) return status;
  // A generation state goes in at row 0 and comes out after the last row: one walk carries it.
  const Walks walks = plan_walks(d.rows, in.state ? GatedDeltaSplits{} : splits);
  return launch_forward_walk<false>(d, in, out, s, walks, stream);
}

cudaError_t launch_gated_delta_rule_backward(const GatedDeltaDims& d, const GatedDeltaPointers& in, StridedBf16 dout,
                                             const GatedDeltaGradPointers& grads, GatedDeltaSplits splits,
                                             void* workspace, cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, true, nullptr);
  const Walks walks = plan_walks(d.rows, splits);
  GatedDeltaPointers fresh = in;
  fresh.state = nullptr;  // the backward starts row 0 from zeros
  cudaError_t status = launch_prepare(d, fresh, s, false, stream);
  if (status != cudaSuccess) return status;
  if ((status = launch_forward_walk<true>(d, fresh, StridedBf16{}, s, walks, stream)) != cudaSuccess) return status;
  const unsigned parts = unsigned(backward_parts(d)), heads = unsigned(d.v_heads);
  const SharedSizes shared = shared_sizes(d);
  status = with_rows_per_lane(d.k_dim, [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    cudaError_t st = gpu::allow_dynamic_shared_memory(reverse_kernel<R>);
    if (st != cudaSuccess) return st;
    st = gpu::launch_dependent(reverse_kernel<R>, walk_grid(d, walks), walk_threads(d), shared.walk, stream, d, dout,
                               grads.v, s, walks);
    if (st != cudaSuccess) return st;
    if ((st = gpu::allow_dynamic_shared_memory(segment_kernel<R>)) != cudaSuccess) return st;
    return gpu::launch_dependent(segment_kernel<R>, dim3(unsigned(ceil_div(d.rows, kSegment)), parts * heads),
                                 unsigned(16 * R), shared.segment, stream, d, in.v, dout, s);
  });
  if (status != cudaSuccess) return status;
  const unsigned qk_blocks = unsigned(ceil_div(d.rows * d.k_heads, 8));
  if ((status = gpu::launch_dependent(finish_qk_kernel, qk_blocks, 256, 0, stream, d, in, grads, s)) != cudaSuccess)
    return status;
  return gpu::launch_dependent(finish_gates_kernel, unsigned(ceil_div(d.v_heads, 4)), 128, 0, stream, d, in, grads, s);
}

}  // namespace moetune::ops::cuda
