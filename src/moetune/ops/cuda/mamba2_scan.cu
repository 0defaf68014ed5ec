// The Mamba2 selective scan as the chunked "state space duality" algorithm (Mamba-2 paper, section 6), forward
// and backward, fp32 inside, BF16 in and out.
//
// Per head h and row n: a_n = dt_n·A, u_n = dt_n·x_n, state_n = e^{a_n}·state_{n-1} + u_n ⊗ B_n,
// y_n = state_n·C_n + D·x_n. Within a chunk, with cs the chunk-local cumulative sum of a:
//   y_i = Σ_{j≤i, same document} e^{cs_i−cs_j} (C_i·B_j) u_j  +  [i carries] e^{cs_i} C_i·Sin_c  +  D x_i
// where Sin_c is the state entering chunk c and "i carries" means no document starts in the chunk up to i (the
// mask e^{-inf} across a document start). The chunk's own end state S_c (the first sum's state form) and the
// carried one give Sin_{c+1} = S_c + [end carries] e^{cs_end} Sin_c: a short recurrence over chunks.
//
// The backward runs the same chunks in reverse. With dS_c = d Sin_{c+1} (itself the recurrence
//   d Sin_c = Σ_{i carries} e^{cs_i} dy_i ⊗ C_i + [end carries] e^{cs_end} d Sin_{c+1}),
// "stuff" = dL/du (intra-chunk and through S_c) gives dx = D dy + dt·stuff, and the decays' gradient comes from
// the identity d/dcs_i = dy_i·y_ssm_i − u_i·stuff_i (+ ⟨d Sin_{c+1}, Sin_{c+1}⟩ at the chunk's last row), summed
// backwards within the chunk into da. dB and dC are the same masked products transposed, one head at a time,
// then summed over the heads of a group.
//
// Every chunk-level product is a small matmul on shared memory (tile_matmul: TF32 tensor cores for whole 16×16
// tiles, else 4×4 fp32 register tiles on the CUDA cores); the block of a (chunk, head) stages both operands whole,
// which bounds chunk and widths by the shared memory (mamba2_scan_shared_bytes).
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <vector>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/mamba2_scan_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

// 16 warps: the (chunk, head) blocks run one per SM (their shared memory), so their loads need many threads.
constexpr int kThreads = 512;

// The scratch, carved from one workspace (floats unless said).
struct Scratch {
  float *dt, *cs;          // [N, H]: dt after softplus/clamp, chunk-local cumulative Σ dt·A
  int* seg;                // [N]: the row's document's first row when it lies in the row's chunk, else -1
  float* cb;               // [chunks, G, L, L]: C_i·B_j per chunk and group
  float* states;           // [chunks + 1, H, P, S]: Sin_c, the state entering chunk c (Sin_0 = 0)
  // backward only
  float* dstates;          // [chunks + 1, H, P, S]: d Sin_c
  float* ydot;             // [N, H]: dy·y_ssm
  float *db_head, *dc_head;  // [N, H, S]: each head's share of dB and dC
  float *part_dt_bias, *part_a_log, *part_d;  // [chunks, H]
};

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Carver {
  char* base;
  size_t used = 0;
  template <typename T>
  T* take(int64_t count) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += align_up(size_t(count) * sizeof(T));
    return p;
  }
};

Scratch carve(const Mamba2ScanDims& d, void* workspace, bool backward, size_t* bytes) {
  Carver c{static_cast<char*>(workspace)};
  const int64_t n = d.rows, h = d.heads, chunks = d.chunks(), state_elems = (chunks + 1) * h * d.head_dim * d.state;
  Scratch s{};
  s.dt = c.take<float>(n * h);
  s.cs = c.take<float>(n * h);
  s.seg = c.take<int>(n);
  s.cb = c.take<float>(chunks * d.groups * d.chunk * d.chunk);
  s.states = c.take<float>(state_elems);
  if (backward) {
    s.dstates = c.take<float>(state_elems);
    s.ydot = c.take<float>(n * h);
    s.db_head = c.take<float>(n * h * d.state);
    s.dc_head = c.take<float>(n * h * d.state);
    s.part_dt_bias = c.take<float>(chunks * h);
    s.part_a_log = c.take<float>(chunks * h);
    s.part_d = c.take<float>(chunks * h);
  }
  if (bytes) *bytes = c.used;
  return s;
}

__device__ __forceinline__ float param(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? to_float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ float bf(const StridedBf16& m, int64_t row, int64_t col) {
  return to_float(static_cast<const bf16*>(m.data)[row * m.ld + col]);
}

// torch's softplus (threshold 20).
__device__ __forceinline__ float softplus(float u) { return u > 20.0f ? u : log1pf(expf(u)); }

// The rows of chunk c: [first, first + count).
struct ChunkRows {
  int64_t first;
  int count;
};
__device__ __forceinline__ ChunkRows chunk_rows(const Mamba2ScanDims& d, int64_t c) {
  const int64_t first = c * d.chunk;
  return {first, int(min(d.chunk, d.rows - first))};
}

// For e in [0, count) across the block: store(e, load(e)), kUnroll loads in flight per thread before their
// stores (a plain loop would wait out one global-memory latency per element).
template <int kUnroll = 8, typename Load, typename Store>
__device__ __forceinline__ void fill(int count, Load load, Store store) {
  for (int base = threadIdx.x; base < count; base += blockDim.x * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = base + u * int(blockDim.x);
      v[u] = e < count ? load(e) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = base + u * int(blockDim.x);
      if (e < count) store(e, v[u]);
    }
  }
}

// Σ load(e) over this thread's share of [0, count), loads overlapped as in fill.
template <int kUnroll = 8, typename Load>
__device__ __forceinline__ float thread_sum(int count, Load load) {
  float total = 0.0f;
  fill<kUnroll>(count, load, [&](int, float v) { total += v; });
  return total;
}

// One head's view of a chunk's rows, staged in shared memory by chunk_head: cs and, per row, the local index of
// its document's first row in the chunk, or -1 when the document began before the chunk (the state entering
// the chunk reaches the row).
struct HeadRows {
  const float* cs;
  const int* first;
  int count;
};

// The intra-chunk decay mask: e^{cs_i − cs_j} for j ≤ i in the same document, else 0 (e^{-inf}).
__device__ __forceinline__ float decay(const HeadRows& hr, int i, int j) {
  if (j > i || j < max(hr.first[i], 0)) return 0.0f;
  return expf(hr.cs[i] - hr.cs[j]);
}

// Weight of row i's state-carried term: e^{cs_i} when the state entering the chunk reaches i, else 0.
__device__ __forceinline__ float carried(const HeadRows& hr, int i) { return hr.first[i] < 0 ? expf(hr.cs[i]) : 0.0f; }

// Weight of row j in the chunk's end state: e^{cs_end − cs_j} when j is in the end row's document, else 0.
__device__ __forceinline__ float to_end(const HeadRows& hr, int j) { return decay(hr, hr.count - 1, j); }

// Per-warp staging of a 16×16 fp32 accumulator tile, at the start of every kernel's shared memory.
constexpr int kStageFloats = (kThreads / 32) * 256;

// The tensor-core path of tile_matmul: the fp32 shared operands split into TF32 pairs (3xTF32), fp32
// accumulation, one warp per 16×16 output tile; the tile goes through the warp's staging area so that visit sees
// plain elements. Slot (the `tn` of visit) is 2·(tile column) + the lane's half of the row.
template <typename LayoutA, typename LayoutB, typename Visit>
__device__ void wmma_matmul(int M, int N, int K, const float* a, int lda, const float* b, int ldb, float* stage,
                            Visit visit) {
  using namespace nvcuda;
  constexpr bool kRowA = std::is_same_v<LayoutA, wmma::row_major>, kRowB = std::is_same_v<LayoutB, wmma::row_major>;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
  float* tile = stage + warp * 256;
  const int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
  for (int t = warp; t < tiles; t += warps) {
    const int m0 = (t / tiles_n) * 16, n0 = (t % tiles_n) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> fa, fa_low;
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> fb, fb_low;
      wmma::load_matrix_sync(fa, kRowA ? a + m0 * lda + k : a + m0 + k * lda, lda);
      wmma::load_matrix_sync(fb, kRowB ? b + k * ldb + n0 : b + k + n0 * ldb, ldb);
      // 3xTF32: each operand as a TF32 high part plus a TF32 remainder, the remainders' product dropped; fp32
      // accuracy (the sums of many signed terms in the dt gradient lose too much with plain TF32).
#pragma unroll
      for (int i = 0; i < fa.num_elements; ++i) {
        const float high = wmma::__float_to_tf32(fa.x[i]);
        fa_low.x[i] = wmma::__float_to_tf32(fa.x[i] - high);
        fa.x[i] = high;
      }
#pragma unroll
      for (int i = 0; i < fb.num_elements; ++i) {
        const float high = wmma::__float_to_tf32(fb.x[i]);
        fb_low.x[i] = wmma::__float_to_tf32(fb.x[i] - high);
        fb.x[i] = high;
      }
      wmma::mma_sync(acc, fa_low, fb, acc);
      wmma::mma_sync(acc, fa, fb_low, acc);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, c0 = (lane % 2) * 8;
#pragma unroll
    for (int c = 0; c < 8; ++c) visit(m0 + r, n0 + c0 + c, (n0 / 16) * 2 + lane % 2, tile[r * 16 + c0 + c]);
    __syncwarp();
  }
}

// For every element of the M×N product Σ_k a(m, k)·b(k, n), with a(m, k) = a[m·am + k·ak] and
// b(k, n) = b[k·bk + n·bn] in shared memory: visit(m, n, slot, value), where the pairs (slot, m) of one call are
// each visited by one thread only and slot < ⌈N/4⌉ (the kernels sum per-row partials by slot).
// On the tensor cores when the product is whole 16×16×8 tiles of row- or column-major operands with 16-byte
// aligned rows; else on the CUDA cores in 4×4 register tiles holding m = tm + r·⌈M/4⌉ and n = tn + r·⌈N/4⌉ (slot
// tn), so that a warp reads consecutive columns of b (no bank conflicts) and few rows of a (broadcasts).
template <typename Visit>
__device__ void tile_matmul(int M, int N, int K, const float* a, int am, int ak, const float* b, int bk, int bn,
                            float* stage, Visit visit) {
  using namespace nvcuda;
  const bool a_row = ak == 1, b_row = bn == 1;
  const int lda = a_row ? am : ak, ldb = b_row ? bk : bn;
  const bool tensor_cores = M % 16 == 0 && N % 16 == 0 && K % 8 == 0 && (a_row || am == 1) && (b_row || bk == 1) &&
                            lda % 4 == 0 && ldb % 4 == 0 && reinterpret_cast<uintptr_t>(a) % 32 == 0 &&
                            reinterpret_cast<uintptr_t>(b) % 32 == 0;
  if (tensor_cores) {
    if (a_row && b_row) wmma_matmul<wmma::row_major, wmma::row_major>(M, N, K, a, lda, b, ldb, stage, visit);
    else if (a_row) wmma_matmul<wmma::row_major, wmma::col_major>(M, N, K, a, lda, b, ldb, stage, visit);
    else if (b_row) wmma_matmul<wmma::col_major, wmma::row_major>(M, N, K, a, lda, b, ldb, stage, visit);
    else wmma_matmul<wmma::col_major, wmma::col_major>(M, N, K, a, lda, b, ldb, stage, visit);
    return;
  }
  const int mq = (M + 3) / 4, nq = (N + 3) / 4;
  for (int t = threadIdx.x; t < mq * nq; t += blockDim.x) {
    const int tm = t / nq, tn = t % nq;
    int a_at[4], b_at[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      a_at[r] = min(tm + r * mq, M - 1) * am;
      b_at[r] = min(tn + r * nq, N - 1) * bn;
    }
    float acc[4][4] = {};
    for (int k = 0; k < K; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        av[r] = a[a_at[r] + k * ak];
        bv[r] = b[k * bk + b_at[r]];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int m = tm + i * mq, n = tn + j * nq;
        if (m < M && n < N) visit(m, n, tn, acc[i][j]);
      }
  }
}

constexpr int kMaxChunk = int(kMamba2MaxChunk);

// dt (softplus of dt_raw + dt_bias, clamped), its chunk-local cumulative Σ dt·A, and each row's document first
// row within its chunk. One block per chunk: dt and dt·A for every (row, head) in parallel, then a thread per
// head sums its column (loads batched), and one thread walks the chunk's start flags in shared memory.
__global__ void discretize_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, Scratch s) {
  gpu::wait_for_previous_kernel();
  __shared__ uint8_t starts[kMaxChunk];
  const ChunkRows ch = chunk_rows(d, blockIdx.x);
  const int H = int(d.heads);
  fill(ch.count * H, [&](int e) {
    const int64_t n = ch.first + e / H, h = e % H;
    return fminf(fmaxf(softplus(bf(in.dt, n, h) + param(in.dt_bias, in.params_bf16, h)), d.dt_min), d.dt_max);
  }, [&](int e, float dt) {
    const int64_t at = (ch.first + e / H) * H + e % H;
    s.dt[at] = dt;
    s.cs[at] = dt * -expf(param(in.a_log, in.params_bf16, e % H));
  });
  for (int i = threadIdx.x; i < ch.count; i += blockDim.x)
    starts[i] = (ch.first + i == 0 && !in.state) || (in.starts && in.starts[ch.first + i]);
  __syncthreads();  // also makes the global writes above visible to the block
  for (int h = threadIdx.x; h < H; h += blockDim.x) {
    float sum = 0.0f;
    constexpr int kBatch = 8;
    for (int i0 = 0; i0 < ch.count; i0 += kBatch) {
      float a[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) a[u] = i0 + u < ch.count ? s.cs[(ch.first + i0 + u) * H + h] : 0.0f;
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (i0 + u < ch.count) {
          sum += a[u];
          s.cs[(ch.first + i0 + u) * H + h] = sum;
        }
    }
  }
  if (threadIdx.x == 0) {
    int64_t first = -1;
    for (int i = 0; i < ch.count; ++i) {
      if (starts[i]) first = ch.first + i;
      s.seg[ch.first + i] = int(first);
    }
  }
}

// C_i·B_j for every pair of rows of a chunk, per group. Block (chunk, group).
__global__ void chunk_cb_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, Scratch s) {
  gpu::wait_for_previous_kernel();
  extern __shared__ __align__(128) float shared[];
  float* stage = shared;
  float* smem = shared + kStageFloats;
  const ChunkRows ch = chunk_rows(d, blockIdx.x);
  const int64_t g = blockIdx.y;
  const int L = ch.count, S = int(d.state), bt_ld = L + 4;
  float* cs = smem;            // [L, S]
  float* bt = smem + L * S;    // [S, L + 4]: B transposed, so that the product reads it by consecutive rows
  fill(L * S, [&](int e) { return bf(in.c, ch.first + e / S, g * S + e % S); }, [&](int e, float v) { cs[e] = v; });
  fill(L * S, [&](int e) { return bf(in.b, ch.first + e / S, g * S + e % S); },
       [&](int e, float v) { bt[(e % S) * bt_ld + e / S] = v; });
  __syncthreads();
  float* out = s.cb + (int64_t(blockIdx.x) * d.groups + g) * d.chunk * d.chunk;
  const int ld = int(d.chunk);
  tile_matmul(L, L, S, cs, S, 1, bt, bt_ld, 1, stage, [&](int i, int j, int, float v) { out[i * ld + j] = v; });
}

// Where a (chunk, head) block works: the chunk's rows, the head and its group, the head's view of the rows, and
// the block's free shared memory. Shared memory holds tile_matmul's staging area, then HeadRows, then `smem`.
struct ChunkHead {
  ChunkRows ch;
  int64_t h, g;
  int L, P, S;  // the chunk's rows, head_dim, state
  float *stage, *smem;
  HeadRows rows;
};

// Floats of shared memory before a kernel's own: the staging area and HeadRows (32-byte aligned).
__host__ __device__ constexpr int64_t head_prefix_floats(int64_t chunk) {
  return kStageFloats + (2 * chunk + 7) / 8 * 8;
}

// Every thread of the block calls it (it stages HeadRows and synchronises).
__device__ ChunkHead chunk_head(const Mamba2ScanDims& d, const Scratch& s) {
  extern __shared__ __align__(128) float shared[];
  const int64_t h = blockIdx.y;
  const ChunkRows ch = chunk_rows(d, blockIdx.x);
  float* cs = shared + kStageFloats;
  int* first = reinterpret_cast<int*>(cs + d.chunk);
  for (int i = threadIdx.x; i < ch.count; i += blockDim.x) {
    cs[i] = s.cs[(ch.first + i) * d.heads + h];
    const int seg = s.seg[ch.first + i];
    first[i] = seg < 0 ? -1 : int(seg - ch.first);
  }
  __syncthreads();
  return {ch,    h, h / (d.heads / d.groups), ch.count, int(d.head_dim), int(d.state), shared,
          shared + head_prefix_floats(d.chunk), {cs, first, ch.count}};
}

// Σ_r f_r · X[r, p] · Y[r, s] over a chunk's rows, per head: the chunk's end state (X = dt·x, Y = B, f = weight
// in the end state; into states[c + 1]) or the local part of d Sin_c (X = dy, Y = C, f = carried weight; into
// dstates[c]). Block (chunk, head).
template <bool kLocalGrad>
__global__ void chunk_outer_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, StridedBf16 dy, Scratch s) {
  gpu::wait_for_previous_kernel();
  const auto [ch, h, g, L, P, S, stage, smem, hr] = chunk_head(d, s);
  float* xs = smem;            // [L, P]
  float* ys = smem + L * P;    // [L, S]
  fill(L * P, [&](int e) {
    const int r = e / P, p = e % P;
    const int64_t n = ch.first + r;
    return kLocalGrad ? carried(hr, r) * bf(dy, n, h * P + p)
                      : to_end(hr, r) * s.dt[n * d.heads + h] * bf(in.x, n, h * P + p);
  }, [&](int e, float v) { xs[e] = v; });
  fill(L * S, [&](int e) { return bf(kLocalGrad ? in.c : in.b, ch.first + e / S, g * S + e % S); },
       [&](int e, float v) { ys[e] = v; });
  __syncthreads();
  const int64_t per_chunk = d.heads * P * S;
  float* out = (kLocalGrad ? s.dstates + blockIdx.x * per_chunk : s.states + (blockIdx.x + 1) * per_chunk) + h * P * S;
  tile_matmul(P, S, L, xs, 1, P, ys, S, 1, stage, [&](int p, int k, int, float v) { out[p * S + k] = v; });
}

// Sin_{c+1} = S_c + [end carries] e^{cs_end} Sin_c over the chunks in order (forward; Sin_0 = `carried` or 0,
// and `carried`, when given, then gets the state after the last row), or d Sin_c = local_c + [end carries]
// e^{cs_end} d Sin_{c+1} in reverse. One thread per state element.
template <bool kReverse>
__global__ void pass_states_kernel(Mamba2ScanDims d, Scratch s, float* carried) {
  gpu::wait_for_previous_kernel();
  const int64_t per_chunk = d.heads * d.head_dim * d.state;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= per_chunk) return;
  const int64_t h = e / (d.head_dim * d.state), chunks = (d.rows + d.chunk - 1) / d.chunk;
  auto factor = [&](int64_t c) {
    const int64_t end = min((c + 1) * d.chunk, d.rows) - 1;
    return s.seg[end] < 0 ? expf(s.cs[end * d.heads + h]) : 0.0f;
  };
  if (!kReverse) {
    float* st = s.states + e;
    float state = carried ? carried[e] : 0.0f;
    st[0] = state;
    for (int64_t c = 0; c < chunks; ++c) {
      state = st[(c + 1) * per_chunk] + factor(c) * state;
      st[(c + 1) * per_chunk] = state;
    }
    if (carried) carried[e] = state;
  } else {
    float* ds = s.dstates + e;
    float grad = 0.0f;
    ds[chunks * per_chunk] = 0.0f;
    for (int64_t c = chunks - 1; c >= 0; --c) {
      grad = ds[c * per_chunk] + factor(c) * grad;
      ds[c * per_chunk] = grad;
    }
  }
}

// The shared memory of a (chunk, head) block that multiplies [L, L + S] · [L + S, P]: the staging area, lhs,
// rhs and per-row partial sums [⌈P/4⌉, L]; and the chunk's C·B of the head's group.
struct ChunkProduct {
  ChunkRows ch;
  int64_t h, g;
  int L, P, S, K, nq;
  float *stage, *lhs, *rhs, *part;
  const float* cb;
  HeadRows rows;
};

__device__ ChunkProduct chunk_product(const Mamba2ScanDims& d, const Scratch& s) {
  const ChunkHead at = chunk_head(d, s);
  ChunkProduct cp;
  cp.rows = at.rows;
  cp.ch = at.ch;
  cp.h = at.h, cp.g = at.g;
  cp.L = at.L, cp.P = at.P, cp.S = at.S, cp.K = cp.L + cp.S, cp.nq = (cp.P + 3) / 4;
  cp.stage = at.stage;
  cp.lhs = at.smem;
  cp.rhs = cp.lhs + cp.L * cp.K;
  cp.part = cp.rhs + cp.K * cp.P;
  cp.cb = s.cb + (int64_t(blockIdx.x) * d.groups + cp.g) * d.chunk * d.chunk;
  return cp;
}

// lhs = [masked decay ⊙ CB | weight(r)·M[r, :]] with M (B or C) of the head's group: the forward's products
// row by row (i, j), the backward's dL/du transposed (row j, column i).
template <bool kTransposed, typename Weight>
__device__ void fill_lhs(const ChunkProduct& cp, const Mamba2ScanDims& d, StridedBf16 m, Weight weight) {
  const int L = cp.L, K = cp.K, S = cp.S;
  fill(L * L, [&](int e) {
    const int r = e / L, q = e % L, i = kTransposed ? q : r, j = kTransposed ? r : q;
    return decay(cp.rows, i, j) * cp.cb[i * d.chunk + j];
  }, [&](int e, float v) { cp.lhs[(e / L) * K + e % L] = v; });
  fill(L * S, [&](int e) { return weight(e / S) * bf(m, cp.ch.first + e / S, cp.g * S + e % S); },
       [&](int e, float v) { cp.lhs[(e / S) * K + L + e % S] = v; });
}

// y = [decay ⊙ CB | carried·C] · [u ; Sinᵀ] per (chunk, head). The forward writes y + D·x; the backward
// (kDot) writes dy·(y − D·x) per row and head instead, for the decays' gradient.
template <bool kDot>
__global__ void chunk_output_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, StridedBf16 y, Scratch s) {
  gpu::wait_for_previous_kernel();
  const ChunkProduct cp = chunk_product(d, s);
  const ChunkRows ch = cp.ch;
  const int64_t h = cp.h;
  const int L = cp.L, P = cp.P, S = cp.S, K = cp.K, nq = cp.nq;
  float *stage = cp.stage, *lhs = cp.lhs, *rhs = cp.rhs, *part = cp.part;
  fill_lhs<false>(cp, d, in.c, [&](int i) { return carried(cp.rows, i); });
  fill(L * P, [&](int e) { return s.dt[(ch.first + e / P) * d.heads + h] * bf(in.x, ch.first + e / P, h * P + e % P); },
       [&](int e, float v) { rhs[e] = v; });
  const float* state = s.states + (int64_t(blockIdx.x) * d.heads + h) * P * S;
  fill(P * S, [&](int e) { return state[e]; }, [&](int e, float v) { rhs[(L + e % S) * P + e / S] = v; });
  if (kDot)
    for (int e = threadIdx.x; e < nq * L; e += blockDim.x) part[e] = 0.0f;
  __syncthreads();
  auto* out = static_cast<bf16*>(y.data);
  if (!kDot) {
    const float skip = param(in.d, in.params_bf16, h);
    tile_matmul(L, P, K, lhs, K, 1, rhs, P, 1, stage, [&](int i, int p, int, float v) {
      const int64_t n = ch.first + i;
      out[n * y.ld + h * P + p] = from_float<bf16>(v + skip * bf(in.x, n, h * P + p));
    });
    return;
  }
  // kDot: y holds dy.
  tile_matmul(L, P, K, lhs, K, 1, rhs, P, 1, stage,
              [&](int i, int p, int tn, float v) { part[tn * L + i] += v * bf(y, ch.first + i, h * P + p); });
  __syncthreads();
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    float sum = 0.0f;
    for (int t = 0; t < nq; ++t) sum += part[t * L + i];
    s.ydot[(ch.first + i) * d.heads + h] = sum;
  }
}

// Per (chunk, head): stuff = [maskedCBᵀ | to_end·B] · [dy ; dSᵀ], then dx, and the dt chain for the chunk's rows
// (the decays' gradient summed backwards, softplus and clamp), with the chunk's shares of d dt_bias, d A_log, dD.
__global__ void chunk_dx_dt_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, StridedBf16 dy,
                                   Mamba2ScanGradPointers grads, Scratch s) {
  gpu::wait_for_previous_kernel();
  const ChunkProduct cp = chunk_product(d, s);
  const ChunkRows ch = cp.ch;
  const int64_t h = cp.h;
  const int L = cp.L, P = cp.P, S = cp.S, K = cp.K, nq = cp.nq;
  float *stage = cp.stage, *lhs = cp.lhs, *rhs = cp.rhs, *part = cp.part;
  float* r_row = part + nq * L;   // [L]: Σ_p x·stuff
  float* da_row = r_row + L;      // [L]: d/dcs, then d(dt·A)
  const int64_t per_chunk = d.heads * P * S;
  const float* dstate = s.dstates + (blockIdx.x + 1) * per_chunk + h * P * S;  // dS_c = d Sin_{c+1}
  const float* state_next = s.states + (blockIdx.x + 1) * per_chunk + h * P * S;
  fill_lhs<true>(cp, d, in.b, [&](int j) { return to_end(cp.rows, j); });
  fill(L * P, [&](int e) { return bf(dy, ch.first + e / P, h * P + e % P); }, [&](int e, float v) { rhs[e] = v; });
  fill(P * S, [&](int e) { return dstate[e]; }, [&](int e, float v) { rhs[(L + e % S) * P + e / S] = v; });
  for (int e = threadIdx.x; e < nq * L; e += blockDim.x) part[e] = 0.0f;
  // ⟨dS_c, Sin_{c+1}⟩ (the end row's decay gradient) and Σ dy·x (dD), in a fixed order.
  float sums[2] = {0.0f, 0.0f};
  sums[0] = thread_sum(P * S, [&](int e) { return dstate[e] * state_next[e]; });
  sums[1] = thread_sum(L * P, [&](int e) {
    return bf(dy, ch.first + e / P, h * P + e % P) * bf(in.x, ch.first + e / P, h * P + e % P);
  });
  block_sum(sums);  // its barriers also publish the shared operands above
  const float skip = param(in.d, in.params_bf16, h);
  auto* dx = static_cast<bf16*>(grads.x.data);
  tile_matmul(L, P, K, lhs, K, 1, rhs, P, 1, stage, [&](int j, int p, int tn, float v) {
    const int64_t n = ch.first + j;
    const float dt = s.dt[n * d.heads + h];
    dx[n * grads.x.ld + h * P + p] = from_float<bf16>(skip * bf(dy, n, h * P + p) + dt * v);
    part[tn * L + j] += bf(in.x, n, h * P + p) * v;
  });
  __syncthreads();
  // Per row: r = Σ_p x·stuff and d/dcs = dy·y_ssm − dt·r (+ the end state's term on the last row), in parallel.
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    float sum = 0.0f;
    for (int t = 0; t < nq; ++t) sum += part[t * L + j];
    r_row[j] = sum;
    const int64_t n = ch.first + j;
    da_row[j] = s.ydot[n * d.heads + h] - s.dt[n * d.heads + h] * sum + (j == L - 1 ? sums[0] : 0.0f);
  }
  __syncthreads();
  // The decays' gradient summed from the chunk's end (a_m feeds cs_k for every k ≥ m): a short serial pass over
  // shared memory.
  if (threadIdx.x == 0)
    for (int j = L - 2; j >= 0; --j) da_row[j] += da_row[j + 1];
  __syncthreads();
  const float a = -expf(param(in.a_log, in.params_bf16, h)), bias = param(in.dt_bias, in.params_bf16, h);
  auto* ddt_out = static_cast<bf16*>(grads.dt.data);
  float totals[2] = {0.0f, 0.0f};  // Σ d dt_raw (d dt_bias), Σ da·dt (dA)
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    const int64_t n = ch.first + j;
    const float u = bf(in.dt, n, h) + bias, soft = softplus(u);
    // torch.clamp passes the gradient where min <= x <= max.
    const float slope = (soft >= d.dt_min && soft <= d.dt_max) ? (u > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-u))) : 0.0f;
    const float ddt_raw = (r_row[j] + a * da_row[j]) * slope;
    ddt_out[n * grads.dt.ld + h] = from_float<bf16>(ddt_raw);
    totals[0] += ddt_raw;
    totals[1] += da_row[j] * s.dt[n * d.heads + h];
  }
  block_sum(totals);
  if (threadIdx.x != 0) return;
  const int64_t at = int64_t(blockIdx.x) * d.heads + h;
  s.part_dt_bias[at] = totals[0];
  s.part_a_log[at] = totals[1] * a;  // dA/dA_log = A
  s.part_d[at] = sums[1];
}

// One head's share of dC (kForB false: rows i, Q[i][j] = decay·(dy_i·u_j), [Q | carried·dy]·[B ; Sin_c]) or of
// dB (kForB true: rows j, Qᵀ, [Qᵀ | to_end·u]·[C ; dS_c]), into fp32 [N, H, S]. Block (chunk, head).
template <bool kForB>
__global__ void chunk_dbc_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, StridedBf16 dy, Scratch s) {
  gpu::wait_for_previous_kernel();
  const auto [ch, h, g, L, P, S, stage, smem, hr] = chunk_head(d, s);
  const int K = L + P;
  float* lhs = smem;          // [L, L + P]: Q, then the row operand scaled
  float* rhs = lhs + L * K;   // [L + P, S]; first the column operand transposed [P, L]
  // Row operand R (dy for dC, u for dB) and column operand (u for dC, dy for dB).
  auto u = [&](int r, int p) { return s.dt[(ch.first + r) * d.heads + h] * bf(in.x, ch.first + r, h * P + p); };
  auto grad = [&](int r, int p) { return bf(dy, ch.first + r, h * P + p); };
  fill(L * P, [&](int e) { return kForB ? u(e / P, e % P) : grad(e / P, e % P); },
       [&](int e, float v) { lhs[(e / P) * K + L + e % P] = v; });
  fill(L * P, [&](int e) { return kForB ? grad(e / P, e % P) : u(e / P, e % P); },
       [&](int e, float v) { rhs[(e % P) * L + e / P] = v; });
  __syncthreads();
  tile_matmul(L, L, P, lhs + L, K, 1, rhs, L, 1, stage, [&](int r, int q, int, float v) {
    lhs[r * K + q] = (kForB ? decay(hr, q, r) : decay(hr, r, q)) * v;
  });
  __syncthreads();
  for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
    const int r = e / P, p = e % P;
    lhs[r * K + L + p] *= kForB ? to_end(hr, r) : carried(hr, r);
  }
  fill(L * S, [&](int e) { return bf(kForB ? in.c : in.b, ch.first + e / S, g * S + e % S); },
       [&](int e, float v) { rhs[e] = v; });
  const int64_t per_chunk = d.heads * P * S;
  const float* state = kForB ? s.dstates + (blockIdx.x + 1) * per_chunk + h * P * S
                             : s.states + blockIdx.x * per_chunk + h * P * S;
  fill(P * S, [&](int e) { return state[e]; }, [&](int e, float v) { rhs[L * S + e] = v; });
  __syncthreads();
  float* out = kForB ? s.db_head : s.dc_head;
  tile_matmul(L, S, K, lhs, K, 1, rhs, S, 1, stage, [&](int r, int k, int, float v) {
    out[((ch.first + r) * d.heads + h) * S + k] = v;
  });
}

// dB or dC [N, G·S] (BF16, strided) = Σ over the heads of each group of their shares, in head order.
__global__ void sum_group_heads_kernel(Mamba2ScanDims d, const float* __restrict__ per_head, StridedBf16 out) {
  gpu::wait_for_previous_kernel();
  const int64_t width = d.groups * d.state;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= d.rows * width) return;
  const int64_t n = e / width, g = (e % width) / d.state, k = e % d.state, per_group = d.heads / d.groups;
  float sum = 0.0f;
  for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) sum += per_head[(n * d.heads + h) * d.state + k];
  static_cast<bf16*>(out.data)[n * out.ld + g * d.state + k] = from_float<bf16>(sum);
}

struct SharedSizes {
  size_t cb, outer, output, dx_dt, dbc;
};

SharedSizes shared_sizes(const Mamba2ScanDims& d) {
  const size_t L = size_t(d.chunk), P = size_t(d.head_dim), S = size_t(d.state), f = sizeof(float);
  const size_t nq = (P + 3) / 4;
  const size_t stage = kStageFloats * f, head = size_t(head_prefix_floats(d.chunk)) * f;
  return {stage + (L * S + S * (L + 4)) * f, head + (L * P + L * S) * f,
          head + (L * (L + S) + (L + S) * P + nq * L) * f, head + (L * (L + S) + (L + S) * P + nq * L + 2 * L) * f,
          head + (L * (L + P) + std::max((L + P) * S, P * L)) * f};
}

// With MOETUNE_MAMBA2_PROFILE set, the kernels of a launcher's second call (the first warms up) are timed by
// events and printed as "MAMBA2_BENCH kernel <name> <ms>": the benchmark's breakdown. Off otherwise.
class KernelTimes {
 public:
  KernelTimes(int* calls, cudaStream_t stream) : stream_(stream) {
    active_ = std::getenv("MOETUNE_MAMBA2_PROFILE") != nullptr && ++*calls == 2;
    mark(nullptr);
  }
  void mark(const char* name) {
    if (!active_) return;
    cudaEvent_t event;
    cudaEventCreate(&event);
    cudaEventRecord(event, stream_);
    marks_.push_back({name, event});
  }
  ~KernelTimes() {
    if (!active_) return;
    cudaEventSynchronize(marks_.back().second);
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second);
      std::printf("MAMBA2_BENCH kernel %-26s %8.3f ms\n", marks_[i].first, ms);
    }
    for (auto& m : marks_) cudaEventDestroy(m.second);
  }

 private:
  cudaStream_t stream_;
  bool active_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

// Chunk states and Sin_c for every chunk: what both passes need first.
cudaError_t run_states(const Mamba2ScanDims& d, const Mamba2ScanPointers& in, const Scratch& s, cudaStream_t stream,
                       KernelTimes& times) {
  const SharedSizes sh = shared_sizes(d);
  const int chunks = int(d.chunks());
  cudaError_t status;
  gpu::launch_dependent(discretize_kernel, chunks, kThreads, 0, stream, d, in, s);
  times.mark("discretize");
  if ((status = gpu::allow_dynamic_shared_memory(chunk_cb_kernel)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_cb_kernel, dim3(chunks, unsigned(d.groups)), kThreads, sh.cb, stream, d, in, s);
  times.mark("chunk_cb");
  if ((status = gpu::allow_dynamic_shared_memory(chunk_outer_kernel<false>)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_outer_kernel<false>, dim3(chunks, unsigned(d.heads)), kThreads, sh.outer, stream, d, in,
                        StridedBf16{}, s);
  times.mark("chunk_states");
  const int64_t elems = d.heads * d.head_dim * d.state;
  gpu::launch_dependent(pass_states_kernel<false>, unsigned((elems + kThreads - 1) / kThreads), kThreads, 0, stream, d,
                        s, in.state);
  times.mark("pass_states");
  return cudaGetLastError();
}

}  // namespace

size_t mamba2_scan_shared_bytes(const Mamba2ScanDims& dims) {
  const SharedSizes s = shared_sizes(dims);
  return std::max({s.cb, s.outer, s.output, s.dx_dt, s.dbc});
}

size_t mamba2_scan_forward_workspace_bytes(const Mamba2ScanDims& dims) {
  size_t bytes = 0;
  carve(dims, nullptr, false, &bytes);
  return bytes;
}

size_t mamba2_scan_backward_workspace_bytes(const Mamba2ScanDims& dims) {
  size_t bytes = 0;
  carve(dims, nullptr, true, &bytes);
  return bytes;
}

cudaError_t launch_mamba2_scan_forward(const Mamba2ScanDims& d, const Mamba2ScanPointers& in, StridedBf16 y,
                                       void* workspace, cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, false, nullptr);
  static int calls = 0;
  KernelTimes times(&calls, stream);
  cudaError_t status = run_states(d, in, s, stream, times);
  if (status != cudaSuccess) return status;
  const size_t shared = shared_sizes(d).output;
  if ((status = gpu::allow_dynamic_shared_memory(chunk_output_kernel<false>)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_output_kernel<false>, dim3(unsigned(d.chunks()), unsigned(d.heads)), kThreads, shared,
                        stream, d, in, y, s);
  times.mark("chunk_output");
  return cudaGetLastError();
}

cudaError_t launch_mamba2_scan_backward(const Mamba2ScanDims& d, const Mamba2ScanPointers& in, StridedBf16 dy,
                                        const Mamba2ScanGradPointers& grads, void* workspace, cudaStream_t stream) {
  if (d.rows == 0) return cudaSuccess;
  const Scratch s = carve(d, workspace, true, nullptr);
  static int calls = 0;
  KernelTimes times(&calls, stream);
  cudaError_t status = run_states(d, in, s, stream, times);
  if (status != cudaSuccess) return status;
  const SharedSizes sh = shared_sizes(d);
  const dim3 per_head(unsigned(d.chunks()), unsigned(d.heads));
  if ((status = gpu::allow_dynamic_shared_memory(chunk_output_kernel<true>)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_output_kernel<true>, per_head, kThreads, sh.output, stream, d, in, dy, s);
  times.mark("chunk_output (dy.y)");
  if ((status = gpu::allow_dynamic_shared_memory(chunk_outer_kernel<true>)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_outer_kernel<true>, per_head, kThreads, sh.outer, stream, d, in, dy, s);
  times.mark("chunk_dstates");
  const int64_t elems = d.heads * d.head_dim * d.state;
  gpu::launch_dependent(pass_states_kernel<true>, unsigned((elems + kThreads - 1) / kThreads), kThreads, 0, stream, d,
                        s, static_cast<float*>(nullptr));
  times.mark("pass_dstates");
  if ((status = gpu::allow_dynamic_shared_memory(chunk_dx_dt_kernel)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_dx_dt_kernel, per_head, kThreads, sh.dx_dt, stream, d, in, dy, grads, s);
  times.mark("chunk_dx_dt");
  if ((status = gpu::allow_dynamic_shared_memory(chunk_dbc_kernel<false>)) != cudaSuccess) return status;
  if ((status = gpu::allow_dynamic_shared_memory(chunk_dbc_kernel<true>)) != cudaSuccess) return status;
  gpu::launch_dependent(chunk_dbc_kernel<false>, per_head, kThreads, sh.dbc, stream, d, in, dy, s);
  times.mark("chunk_dC");
  gpu::launch_dependent(chunk_dbc_kernel<true>, per_head, kThreads, sh.dbc, stream, d, in, dy, s);
  times.mark("chunk_dB");
  const int64_t bc = d.rows * d.groups * d.state;
  const unsigned bc_blocks = unsigned((bc + kThreads - 1) / kThreads);
  gpu::launch_dependent(sum_group_heads_kernel, bc_blocks, kThreads, 0, stream, d, s.dc_head, grads.c);
  gpu::launch_dependent(sum_group_heads_kernel, bc_blocks, kThreads, 0, stream, d, s.db_head, grads.b);
  times.mark("sum_group_heads");
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  const int64_t chunks = d.chunks();
  const std::pair<const float*, void*> params[] = {
      {s.part_dt_bias, grads.dt_bias}, {s.part_a_log, grads.a_log}, {s.part_d, grads.d}};
  for (const auto& [partial, out] : params)
    if (out && (status = launch_add_column_sums(partial, chunks, d.heads, d.heads, out, grads.grads_bf16, stream)) !=
                   cudaSuccess)
      return status;
  return cudaSuccess;
}

}  // namespace moetune::ops::cuda
