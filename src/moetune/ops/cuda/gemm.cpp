// Row-major GEMM over column-major cuBLASLt: a row-major [R, C] matrix is, byte for byte, its transpose stored
// column-major, so D = op(A)·op(B) is computed as Dᵀ = op(B)ᵀ·op(A)ᵀ with cuBLASLt's "A" being our b and its
// "B" our a, each keeping its own transpose flag.
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gemm_candidates.h"

#include <cublasLt.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/bias_broadcast_kernels.h"
#include "moetune/ops/cuda/bias_grad_kernels.h"
#include "moetune/ops/cuda/elementwise.h"

namespace moetune::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// How many of the heuristic's ranked algorithms matmul_tuned times (the LM head's faster ones rank 2nd to 7th).
constexpr int kTunedCandidates = 8;
// matmul_tuned leaves the heuristic's first algorithm only for one at least this much faster: candidates within
// the timing's noise (~1%) would otherwise swap from one process to the next.
constexpr double kTuningMargin = 0.02;
// Before its timings matmul_tuned keeps the GPU busy with the first candidate for about this long. Step 1 meets a
// GPU below the clocks its 700 W cap settles at under sustained GEMMs, and there the tiles' differences shrink:
// Moonlight's logits GEMM ran its 5th candidate 4% faster than the first at step 1 (1.64 against 1.71 ms) and
// 10% faster in the steady state (1.74 against 1.92 ms), so that with the 2% margin one process in three kept
// the first (session 17, call D: 1.98x HF against 2.02x for the two that did not).
constexpr double kTuningLoadMs = 60.0;
// At most this many problems a process are timed; later ones run the heuristic's first. A guard: a caller that
// met a new shape at every step would otherwise wait for 8 algorithms' timings at every step.
constexpr int kMaxTunedProblems = 64;

void check_cublas(cublasStatus_t status, std::string_view what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt {} failed: {} ({})", what, cublasLtGetStatusString(status), cublasLtGetStatusName(status));
}

// A tensor read as a row-major matrix: rows = dim 0, columns = every other dimension folded.
struct Matrix {
  int64_t rows = 0, cols = 0;
};

Matrix matrix_of(const Tensor& t, std::string_view role, std::string_view op) {
  MOETUNE_CHECK(t.defined(), "{}: {} is undefined", op, role);
  MOETUNE_CHECK(t.dim() >= 2, "{}: {} {} must have at least 2 dimensions", op, role, t.str());
  MOETUNE_CHECK(t.device().is_cuda(), "{}: {} {} must be on the GPU", op, role, t.str());
  int64_t cols = 1;
  for (int64_t d = 1; d < t.dim(); ++d) cols *= t.size(d);
  return {t.size(0), cols};
}

cudaDataType_t cuda_type(DType dtype) { return dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// The largest power of two (up to cuBLASLt's default 256) dividing the address: algorithms are chosen for the
// alignment actually present, since views (a narrowed parameter, a chunk of rows) start at arbitrary offsets.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  for (uint32_t a = 256; a > 1; a /= 2)
    if (address % a == 0) return a;
  return 1;
}

// Everything the chosen algorithm depends on. Shapes are in cuBLASLt's column-major terms. beta is not part of
// it: the heuristic never sees beta, so an algorithm it returns serves every beta (C is D, read when beta ≠ 0).
struct PlanKey {
  int64_t m = 0, n = 0, k = 0;  // cuBLASLt's: D is [m, n] column-major (our N, M)
  bool transpose_first = false, transpose_second = false;
  cudaDataType_t d_type = CUDA_R_16BF;
  uint32_t align_first = 0, align_second = 0, align_d = 0;
  int candidate = 0;  // which of the heuristic's ranked algorithms (0: its first, what matmul runs)
  int split_k = 0;    // K split into this many parts when > 0 (0: as the algorithm comes)
  bool tuned = false;  // the fastest of the first kTunedCandidates, timed (matmul_tuned)
  auto operator<=>(const PlanKey&) const = default;
};

// One attribute of an algorithm's configuration (0 when cuBLASLt does not report it).
uint32_t algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  uint32_t value = 0;  // the narrower attributes (uint16_t) fill its low bytes (little-endian)
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  if (written == 0) {
    uint16_t narrow = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &narrow, sizeof(narrow), &written);
    value = narrow;
  }
  return value;
}

// Descriptors and the heuristic's algorithm for one PlanKey; created once, reused for the life of the process.
class Plan {
 public:
  // Asks the heuristic for its first max(limit, key.candidate + 1) algorithms and takes candidate key.candidate.
  Plan(cublasLtHandle_t handle, const PlanKey& key, int limit = 1) {
    check_cublas(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t op_first = key.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
                 "set TRANSA");
    check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
                 "set TRANSB");
    // Stored (pre-op) shapes: first is [m, k] or, transposed, [k, m]; second is [k, n] or [n, k].
    const int64_t first_rows = key.transpose_first ? key.k : key.m, first_cols = key.transpose_first ? key.m : key.k;
    const int64_t second_rows = key.transpose_second ? key.n : key.k, second_cols = key.transpose_second ? key.k : key.n;
    check_cublas(cublasLtMatrixLayoutCreate(&first_, CUDA_R_16BF, uint64_t(first_rows), uint64_t(first_cols), first_rows),
                 "cublasLtMatrixLayoutCreate");
    check_cublas(cublasLtMatrixLayoutCreate(&second_, CUDA_R_16BF, uint64_t(second_rows), uint64_t(second_cols),
                                            second_rows),
                 "cublasLtMatrixLayoutCreate");
    check_cublas(cublasLtMatrixLayoutCreate(&d_, key.d_type, uint64_t(key.m), uint64_t(key.n), key.m),
                 "cublasLtMatrixLayoutCreate");

    cublasLtMatmulPreference_t preference = nullptr;
    check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
        preference_owner(preference, &cublasLtMatmulPreferenceDestroy);
    const uint64_t workspace = kWorkspaceBytes;
    check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof(workspace)),
                 "set MAX_WORKSPACE_BYTES");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_first},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_second},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
    for (const auto& [attribute, bytes] : alignments)
      check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)),
                   "set MIN_ALIGNMENT");

    ranked_.resize(size_t(std::max({limit, key.candidate + 1, key.tuned ? kTunedCandidates : 0})));
    int returned = 0;
    check_cublas(cublasLtMatmulAlgoGetHeuristic(handle, desc_, first_, second_, d_, d_, preference, int(ranked_.size()),
                                                ranked_.data(), &returned),
                 "cublasLtMatmulAlgoGetHeuristic");
    ranked_.resize(size_t(returned));
    std::erase_if(ranked_, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWorkspaceBytes; });
    MOETUNE_CHECK(ranked_.size() > size_t(key.candidate),
                  "cuBLASLt has {} algorithms for D[{}, {}] = op(A)·op(B), K = {}, transposes ({}, {}), output {}, "
                  "alignments ({}, {}, {}); candidate {} was asked for",
                  ranked_.size(), key.n, key.m, key.k, key.transpose_second, key.transpose_first,
                  key.d_type == CUDA_R_16BF ? "BF16" : "F32", key.align_second, key.align_first, key.align_d,
                  key.candidate);
    algo_ = ranked_[size_t(key.candidate)].algo;
    if (key.split_k > 0) split(handle, key.split_k);
  }
  ~Plan() {
    // Host-side objects only; failures at process exit are of no consequence.
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (second_) cublasLtMatrixLayoutDestroy(second_);
    if (first_) cublasLtMatrixLayoutDestroy(first_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Splits the chosen algorithm's K into `parts` (partial sums reduced in the workspace in fp32 where the
  // algorithm allows, in a fixed order either way); fails when it cannot.
  void split(cublasLtHandle_t handle, int parts) {
    int32_t supported = 0;
    uint32_t schemes = 0;
    size_t written = 0;
    check_cublas(cublasLtMatmulAlgoCapGetAttribute(&algo_, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported,
                                                   sizeof(supported), &written),
                 "get SPLITK_SUPPORT");
    check_cublas(cublasLtMatmulAlgoCapGetAttribute(&algo_, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                                   sizeof(schemes), &written),
                 "get REDUCTION_SCHEME_MASK");
    MOETUNE_CHECK(supported != 0 || parts == 1, "cuBLASLt: this algorithm does not split K");
    const uint32_t scheme = parts == 1                                      ? CUBLASLT_REDUCTION_SCHEME_NONE
                            : (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                            : (schemes & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)  ? CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE
                                                                                 : CUBLASLT_REDUCTION_SCHEME_INPLACE;
    const int32_t count = parts;
    check_cublas(cublasLtMatmulAlgoConfigSetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &count, sizeof(count)),
                 "set SPLITK_NUM");
    check_cublas(cublasLtMatmulAlgoConfigSetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                      sizeof(scheme)),
                 "set REDUCTION_SCHEME");
    cublasLtMatmulHeuristicResult_t checked{};
    check_cublas(cublasLtMatmulAlgoCheck(handle, desc_, first_, second_, d_, d_, &algo_, &checked),
                 "cublasLtMatmulAlgoCheck");
    MOETUNE_CHECK(checked.workspaceSize <= kWorkspaceBytes, "cuBLASLt: K in {} parts wants {} bytes of workspace",
                  parts, checked.workspaceSize);
  }

  // What the heuristic offered, best first.
  const std::vector<cublasLtMatmulHeuristicResult_t>& ranked() const { return ranked_; }

  // Times each ranked algorithm on these operands, writing D (beta 0: the caller's D is about to be overwritten,
  // so no scratch memory is needed), and keeps the fastest where it beats the heuristic's first by kTuningMargin.
  // The candidates take turns (kTuningRounds rounds, each candidate's median round counts): timed one after the
  // other, each in one go, the later ones ran at the lower clocks of a GPU warming under the load (its 700 W
  // cap), and a hot GPU's step 1 once picked a logits tile 10% slower in the steady state (docs/benchmarks.md,
  // session 17); and the GPU is kept busy first (kTuningLoadMs), so that the timings see the clocks of the steady
  // state. The host waits for the timings: once per problem and process. Returns what it chose, in words.
  std::string choose_fastest(cublasLtHandle_t handle, const void* first, const void* second, void* d, float alpha,
                             void* workspace) {
    cudaEvent_t start = nullptr, stop = nullptr;
    gpu::check(cudaEventCreate(&start), "matmul_tuned: cudaEventCreate");
    gpu::check(cudaEventCreate(&stop), "matmul_tuned: cudaEventCreate");
    constexpr int kTuningRounds = 5, kRunsPerRound = 2;
    const float beta = 0.0f;
    auto launch = [&](size_t i) {
      algo_ = ranked_[i].algo;
      return cublasLtMatmul(handle, desc_, &alpha, first, first_, second, second_, &beta, d, d_, d, d_, &algo_,
                            workspace, kWorkspaceBytes, gpu::stream());
    };
    std::vector<std::vector<double>> rounds(ranked_.size());  // each candidate's rounds, ms a run
    std::vector<bool> runs(ranked_.size());
    for (size_t i = 0; i < ranked_.size(); ++i)
      runs[i] = launch(i) == CUBLAS_STATUS_SUCCESS;  // warm-up; an algorithm that will not run is not chosen
    if (runs[0]) {  // the load (kTuningLoadMs), sized by one timed run
      gpu::check(cudaEventRecord(start, gpu::stream()), "matmul_tuned: cudaEventRecord");
      check_cublas(launch(0), "cublasLtMatmul (load)");
      gpu::check(cudaEventRecord(stop, gpu::stream()), "matmul_tuned: cudaEventRecord");
      gpu::check(cudaEventSynchronize(stop), "matmul_tuned: cudaEventSynchronize");
      float ms = 0.0f;
      gpu::check(cudaEventElapsedTime(&ms, start, stop), "matmul_tuned: cudaEventElapsedTime");
      const int load_runs = int(std::min(1000.0, kTuningLoadMs / std::max(double(ms), 0.01)));
      for (int r = 0; r < load_runs; ++r) check_cublas(launch(0), "cublasLtMatmul (load)");
    }
    for (int round = 0; round < kTuningRounds; ++round)
      for (size_t i = 0; i < ranked_.size(); ++i) {
        if (!runs[i]) continue;
        gpu::check(cudaEventRecord(start, gpu::stream()), "matmul_tuned: cudaEventRecord");
        for (int r = 0; r < kRunsPerRound; ++r) check_cublas(launch(i), "cublasLtMatmul (timed)");
        gpu::check(cudaEventRecord(stop, gpu::stream()), "matmul_tuned: cudaEventRecord");
        gpu::check(cudaEventSynchronize(stop), "matmul_tuned: cudaEventSynchronize");
        float ms = 0.0f;
        gpu::check(cudaEventElapsedTime(&ms, start, stop), "matmul_tuned: cudaEventElapsedTime");
        rounds[i].push_back(double(ms) / kRunsPerRound);
      }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::vector<double> round_ms(ranked_.size(), std::numeric_limits<double>::infinity());  // the medians
    for (size_t i = 0; i < ranked_.size(); ++i)
      if (!rounds[i].empty()) {
        std::sort(rounds[i].begin(), rounds[i].end());
        round_ms[i] = rounds[i][rounds[i].size() / 2];
      }
    const double first_ms = round_ms[0];
    double best_ms = first_ms;
    size_t best = 0;
    for (size_t i = 1; i < ranked_.size(); ++i)
      if (round_ms[i] < best_ms && round_ms[i] < first_ms * (1.0 - kTuningMargin)) best_ms = round_ms[i], best = i;
    algo_ = ranked_[best].algo;
    return fmt::format("the heuristic's algorithm {} of {} (tile {}), {:.3f} ms, against its first's {:.3f} ms", best,
                       ranked_.size(), algo_config(algo_, CUBLASLT_ALGO_CONFIG_TILE_ID), best_ms, first_ms);
  }

  // C is D unless the caller gives another matrix of D's layout (matmul_add): cuBLASLt reads C and writes D.
  void run(cublasLtHandle_t handle, const void* first, const void* second, const void* c, void* d, float alpha,
           float beta, void* workspace) const {
    check_cublas(cublasLtMatmul(handle, desc_, &alpha, first, first_, second, second_, &beta, c, d_, d, d_, &algo_,
                                workspace, kWorkspaceBytes, gpu::stream()),
                 "cublasLtMatmul");
  }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::vector<cublasLtMatmulHeuristicResult_t> ranked_;
};

// The process's one cuBLASLt handle, workspace and plan cache. A function-local static: it is built after the
// CUDA runtime has initialised, so its destructor runs before the runtime's own exit handler, and it can give
// everything back (which keeps compute-sanitizer's leak check clean).
class GemmLibrary {
 public:
  static GemmLibrary& instance() {
    static GemmLibrary library;
    return library;
  }
  ~GemmLibrary() {
    plans_.clear();
    gpu::release(workspace_);
    if (cudaStreamSynchronize(gpu::stream()) != cudaSuccess) cudaGetLastError();
    cublasLtDestroy(handle_);
  }

  void run(const PlanKey& key, const void* first, const void* second, const void* c, void* d, float alpha,
           float beta) {
    std::lock_guard lock(mutex_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto plan = std::make_unique<Plan>(handle_, key);
      // A tuned problem met first with beta ≠ 0 keeps the heuristic's first algorithm: D holds what the call adds
      // to, so it cannot be written by timing runs.
      // Said on stderr (a handful of lines a process: the LM head's problems), for whoever reads a run's speed.
      if (key.tuned && beta == 0.0f && tuned_problems_ < kMaxTunedProblems) {
        ++tuned_problems_;
        fmt::print(stderr, "moetune: matmul D[{}, {}] = op(A)·op(B), K = {}, tuned: {}\n", key.n, key.m, key.k,
                   plan->choose_fastest(handle_, first, second, d, alpha, workspace_));
      }
      it = plans_.emplace(key, std::move(plan)).first;
    }
    it->second->run(handle_, first, second, c, d, alpha, beta, workspace_);
  }

  // The heuristic's first `limit` algorithms for the problem (a plan made for the question, not kept).
  std::vector<cublasLtMatmulHeuristicResult_t> ranked(const PlanKey& key, int limit) {
    std::lock_guard lock(mutex_);
    return Plan(handle_, key, limit).ranked();
  }

 private:
  GemmLibrary() {
    check_cublas(cublasLtCreate(&handle_), "cublasLtCreate");
    // Stream-ordered on gpu::stream(), like every other use of it, so it is ready for the first GEMM.
    workspace_ = gpu::allocate(kWorkspaceBytes);
  }
  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  int tuned_problems_ = 0;  // kMaxTunedProblems
};

bool g_tuning = true;  // set_gemm_tuning

bool is_bf16_or_f32(DType dtype) { return dtype == DType::BF16 || dtype == DType::F32; }

// The checks of matmul's arguments and its PlanKey; nullopt when there is nothing for cuBLASLt to do (M or N is 0,
// or K is 0, which is done here).
std::optional<PlanKey> plan_key(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& d,
                                float beta) {
  constexpr std::string_view op = "matmul";
  const Matrix am = matrix_of(a, "a", op), bm = matrix_of(b, "b", op), dm = matrix_of(d, "d", op);
  MOETUNE_CHECK(a.dtype() == DType::BF16 && b.dtype() == DType::BF16, "matmul: a {} and b {} must be BF16", a.str(),
                b.str());
  MOETUNE_CHECK(is_bf16_or_f32(d.dtype()), "matmul: d {} must be BF16 or F32", d.str());
  const int64_t m = transpose_a ? am.cols : am.rows, k = transpose_a ? am.rows : am.cols;
  const int64_t k_b = transpose_b ? bm.cols : bm.rows, n = transpose_b ? bm.rows : bm.cols;
  MOETUNE_CHECK(k == k_b && dm.rows == m && dm.cols == n,
                "matmul: a {}{} times b {}{} into d {}: shapes do not agree", a.str(), transpose_a ? "ᵀ" : "", b.str(),
                transpose_b ? "ᵀ" : "", d.str());
  if (m == 0 || n == 0) return std::nullopt;
  if (k == 0) {
    // An empty sum: D = beta·D. cuBLASLt is not asked to handle K = 0.
    MOETUNE_CHECK(beta == 0.0f || beta == 1.0f, "matmul: K = 0 with beta = {} (only 0 or 1)", beta);
    if (beta == 0.0f) gpu::check(cudaMemsetAsync(d.raw_data(), 0, d.nbytes(), gpu::stream()), "matmul: zero d");
    return std::nullopt;
  }
  return PlanKey{.m = n,
                 .n = m,
                 .k = k,
                 .transpose_first = transpose_b,
                 .transpose_second = transpose_a,
                 .d_type = cuda_type(d.dtype()),
                 .align_first = alignment_of(b.raw_data()),
                 .align_second = alignment_of(a.raw_data()),
                 .align_d = alignment_of(d.raw_data())};
}

// Runs (making it the first time) the plan of `key` on matmul's operands; C is D unless `c` is given.
void run_plan(const PlanKey& key, const Tensor& a, const Tensor& b, const Tensor& d, float alpha, float beta,
              const Tensor* c = nullptr) {
  try {
    GemmLibrary::instance().run(key, b.raw_data(), a.raw_data(), c ? c->raw_data() : d.raw_data(), d.raw_data(),
                                alpha, beta);
  } catch (const Error& e) {  // the context is formatted only on failure: this is the hot path
    fail("matmul of a {} and b {} into d {}: {}", a.str(), b.str(), d.str(), e.what());
  }
}

}  // namespace

void matmul_candidate(int candidate, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& d, float alpha, float beta, int split_k) {
  MOETUNE_CHECK(candidate >= 0 && split_k >= 0, "matmul: candidate {}, K in {} parts", candidate, split_k);
  std::optional<PlanKey> key = plan_key(a, transpose_a, b, transpose_b, d, beta);
  if (!key) return;
  key->candidate = candidate;
  key->split_k = split_k;
  run_plan(*key, a, b, d, alpha, beta);
}

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& d, float alpha,
            float beta) {
  matmul_candidate(0, a, transpose_a, b, transpose_b, d, alpha, beta);
}

void matmul_add(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
                const Tensor& d) {
  MOETUNE_CHECK(c.defined() && c.device().is_cuda() && c.dtype() == d.dtype() && c.shape() == d.shape(),
                "matmul_add: c {} must be on the GPU with d {}'s dtype and shape", c.str(), d.str());
  MOETUNE_CHECK(c.raw_data() != d.raw_data(), "matmul_add: c {} is d (use matmul with beta 1)", c.str());
  std::optional<PlanKey> key = plan_key(a, transpose_a, b, transpose_b, d, 1.0f);
  if (!key) {  // nothing to multiply: D = C (K = 0 left D as it was; M or N = 0 has no elements)
    if (d.numel() > 0)
      gpu::check(cudaMemcpyAsync(d.raw_data(), c.raw_data(), d.nbytes(), cudaMemcpyDeviceToDevice, gpu::stream()),
                 "matmul_add: copy c");
    return;
  }
  // C and D share one layout descriptor and one alignment promise: the lesser of the two addresses'.
  key->align_d = std::min(key->align_d, alignment_of(c.raw_data()));
  run_plan(*key, a, b, d, 1.0f, 1.0f, &c);
}

void matmul_tuned(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& d, float alpha,
                  float beta) {
  std::optional<PlanKey> key = plan_key(a, transpose_a, b, transpose_b, d, beta);
  if (!key) return;
  key->tuned = g_tuning;
  run_plan(*key, a, b, d, alpha, beta);
}

void set_gemm_tuning(bool on) { g_tuning = on; }

std::vector<GemmCandidate> matmul_candidates(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                                             const Tensor& d, int limit) {
  const std::optional<PlanKey> key = plan_key(a, transpose_a, b, transpose_b, d, 0.0f);
  if (!key) return {};
  std::vector<GemmCandidate> candidates;
  for (const cublasLtMatmulHeuristicResult_t& r : GemmLibrary::instance().ranked(*key, limit)) {
    int32_t id = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
    candidates.push_back(
        {.description = fmt::format("algo {} tile {} stages {} split-k {} reduction {} swizzle {} custom {} inner {} "
                                    "cluster {}, workspace {} B, waves {:.2f}",
                                    id, algo_config(r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
                                    algo_config(r.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), r.workspaceSize,
                                    r.wavesCount)});
  }
  return candidates;
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  constexpr std::string_view op = "linear_forward";
  const Matrix xm = matrix_of(x, "x", op), wm = matrix_of(weight, "weight", op), ym = matrix_of(y, "y", op);
  MOETUNE_CHECK(xm.cols == wm.cols && ym.rows == xm.rows && ym.cols == wm.rows,
                "linear_forward: x {} with weight {} into y {}: shapes do not agree", x.str(), weight.str(), y.str());
  if (!bias.defined()) {
    matmul(x, false, weight, true, y);
    return;
  }
  MOETUNE_CHECK(bias.device().is_cuda() && is_bf16_or_f32(bias.dtype()) && bias.numel() == wm.rows,
                "linear_forward: bias {} for {} outputs must be BF16 or F32 on the GPU", bias.str(), wm.rows);
  MOETUNE_CHECK(is_bf16_or_f32(y.dtype()), "linear_forward: y {} must be BF16 or F32", y.str());
  gpu::check(launch_bias_broadcast(bias.raw_data(), bias.dtype() == DType::BF16, y.raw_data(), y.dtype() == DType::BF16,
                                   ym.rows, ym.cols, gpu::stream()),
             fmt::format("bias broadcast of {} into {}", bias.str(), y.str()));
  matmul(x, false, weight, true, y, 1.0f, 1.0f);
}

void linear_forward_residual(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& y) {
  if (bias.defined()) {  // the bias goes into y first, so the residual takes an add of its own
    linear_forward(x, weight, bias, y);
    add(y, residual, y);
    return;
  }
  const Matrix xm = matrix_of(x, "x", "linear_forward_residual"), wm = matrix_of(weight, "weight", "linear_forward_residual");
  const Matrix ym = matrix_of(y, "y", "linear_forward_residual");
  MOETUNE_CHECK(xm.cols == wm.cols && ym.rows == xm.rows && ym.cols == wm.rows,
                "linear_forward_residual: x {} with weight {} into y {}: shapes do not agree", x.str(), weight.str(),
                y.str());
  matmul_add(x, false, weight, true, residual, y);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                     const Tensor& dbias, bool accumulate_dx, bool write_dweight) {
  constexpr std::string_view op = "linear_backward";
  const Matrix dym = matrix_of(dy, "dy", op), xm = matrix_of(x, "x", op), wm = matrix_of(weight, "weight", op);
  MOETUNE_CHECK(dym.rows == xm.rows && dym.cols == wm.rows && xm.cols == wm.cols,
                "linear_backward: dy {}, x {} and weight {} do not agree", dy.str(), x.str(), weight.str());
  MOETUNE_CHECK(dy.dtype() == DType::BF16, "linear_backward: dy {} must be BF16", dy.str());
  if (dx.defined()) matmul(dy, false, weight, false, dx, 1.0f, accumulate_dx ? 1.0f : 0.0f);
  if (dweight.defined()) {
    const Matrix dwm = matrix_of(dweight, "dweight", op);
    MOETUNE_CHECK(dwm.rows == wm.rows && dwm.cols == wm.cols, "linear_backward: dweight {} for weight {}",
                  dweight.str(), weight.str());
    matmul(dy, true, x, false, dweight, 1.0f, write_dweight ? 0.0f : 1.0f);
  }
  if (dbias.defined()) {
    MOETUNE_CHECK(dbias.device().is_cuda() && is_bf16_or_f32(dbias.dtype()) && dbias.numel() == wm.rows,
                  "linear_backward: dbias {} for {} outputs must be BF16 or F32 on the GPU", dbias.str(), wm.rows);
    gpu::check(launch_bias_grad(dy.raw_data(), dym.rows, dym.cols, dbias.raw_data(), dbias.dtype() == DType::BF16,
                                gpu::stream()),
               fmt::format("bias gradient of {} into {}", dy.str(), dbias.str()));
  }
}

size_t gemm_workspace_bytes() { return kWorkspaceBytes; }

}  // namespace moetune::ops::cuda
