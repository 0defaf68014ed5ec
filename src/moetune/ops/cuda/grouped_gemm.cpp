#include "moetune/ops/cuda/grouped_gemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"

namespace moetune::ops::cuda {
namespace {

void check_operand(std::string_view op, std::string_view name, const Tensor& t, int64_t dims, DType dtype) {
  MOETUNE_CHECK(t.defined(), "{}: {} is undefined", op, name);
  MOETUNE_CHECK(t.device().is_cuda() && t.dim() == dims && t.dtype() == dtype, "{}: {} is {}, expected a {}-D {} CUDA tensor",
                op, name, t.str(), dims, dtype_name(dtype));
}

// TMA reads and writes whole 16-byte rows from 16-byte aligned addresses.
void check_matrix(std::string_view op, std::string_view name, const Tensor& t, int64_t dims) {
  check_operand(op, name, t, dims, DType::BF16);
  MOETUNE_CHECK(t.numel() == 0 || reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0,
                "{}: {} {} does not start on a 16-byte boundary", op, name, t.str());
}

void check_inner_size(std::string_view op, std::string_view what, int64_t size) {
  MOETUNE_CHECK(size > 0 && size % 8 == 0 && size <= std::numeric_limits<int32_t>::max(),
                "{}: {} = {} must be a positive multiple of 8 (16-byte rows of bf16 for TMA)", op, what, size);
}

void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    MOETUNE_CHECK(t->device() == device, "{}: {} is not on the same device as {}", op, t->str(),
                  (*tensors.begin())->str());
}

void check_offsets(std::string_view op, const Tensor& offsets, int64_t groups, int64_t rows) {
  check_operand(op, "offsets", offsets, 1, DType::I32);
  MOETUNE_CHECK(offsets.numel() == groups + 1, "{}: offsets {} for {} groups, expected [{}]", op, offsets.str(), groups,
                groups + 1);
  // The grid has a row per group in the empty-group kernel; CUTLASS's shapes are int.
  MOETUNE_CHECK(groups <= 65535, "{}: {} groups, at most 65535 are supported", op, groups);
  MOETUNE_CHECK(rows <= std::numeric_limits<int32_t>::max(), "{}: {} rows, at most 2^31 - 1 are supported", op, rows);
}

// Read once per device: CUTLASS sizes its persistent grid from it.
int multiprocessor_count() {
  static std::array<std::atomic<int>, 64> cache{};
  int device = 0;
  gpu::check(cudaGetDevice(&device), "cudaGetDevice");
  MOETUNE_CHECK(device >= 0 && size_t(device) < cache.size(), "CUDA device {} is out of range", device);
  int count = cache[size_t(device)].load(std::memory_order_relaxed);
  if (count == 0) {
    gpu::check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    cache[size_t(device)].store(count, std::memory_order_relaxed);
  }
  return count;
}

// The scratch lives until the launch is queued; the stream-ordered allocator keeps it from reuse until the
// kernels that read it have run.
class Scratch {
 public:
  explicit Scratch(size_t nbytes) : data_(gpu::allocate(nbytes)), nbytes_(nbytes) {}
  ~Scratch() { gpu::release(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_;
  size_t nbytes_;
};

const GroupedGemmKernel& kernel_for(GroupedGemmKind kind, GroupedGemmTile tile) {
  for (const GroupedGemmKernel& kernel : kGroupedGemmKernels)
    if (kernel.kind == kind && kernel.tile == tile) return kernel;
  ::moetune::fail("grouped GEMM: no kernel of tile {} is compiled for kind {}", int(tile), int(kind));
}

void launch_on(GroupedGemmTile tile, GroupedGemmKind kind, std::string_view op, const GroupedGemmProblem& problem,
               std::string_view shapes) {
  const GroupedGemmKernel& kernel = kernel_for(kind, tile);
  const int sm_count = multiprocessor_count();
  const Scratch scratch(kernel.scratch_bytes(problem.groups, sm_count));
  const std::string error = kernel.launch(problem, scratch.data(), scratch.nbytes(), sm_count, gpu::stream());
  MOETUNE_CHECK(error.empty(), "{} of {}: {}", op, shapes, error);
}

const char* kind_name(GroupedGemmKind kind) {
  switch (kind) {
    case GroupedGemmKind::RowsTimesWeightT: return "x·Wᵀ";
    case GroupedGemmKind::RowsTimesWeight: return "x·W";
    case GroupedGemmKind::WeightGrad: return "dW";
  }
  return "?";
}

// The tuning of grouped_matmul and grouped_matmul_weight_grad (set_grouped_gemm_tuning): one tile per problem
// and process, chosen by timing on the problem's first overwriting call.
constexpr double kTuningMargin = 0.02;  // the default stays unless another tile is at least this much faster
constexpr int kMaxTunedProblems = 64;   // past these, new problems run the default (shapes that never repeat)
constexpr int kTimedRepeats = 3;        // back-to-back launches per timing
constexpr int kTimedRounds = 2;         // the tiles timed in turn, twice (the clocks drift): the faster round counts

class TileChoices {
 public:
  static TileChoices& instance() {
    static TileChoices choices;
    return choices;
  }

  void set_tuning(bool on) {
    std::lock_guard lock(mutex_);
    tuning_ = on;
  }

  GroupedGemmTile choose(GroupedGemmKind kind, std::string_view op, const GroupedGemmProblem& problem,
                         std::string_view shapes) {
    int device = 0;
    gpu::check(cudaGetDevice(&device), "cudaGetDevice");
    const Key key{int(kind), device, problem.n, problem.k, problem.groups, problem.rows};
    std::lock_guard lock(mutex_);
    if (auto it = chosen_.find(key); it != chosen_.end()) return it->second;
    const std::vector<GroupedGemmTile> tiles = grouped_gemm_tiles(kind);
    GroupedGemmTile choice = tiles.front();
    // Timing runs write the output, so only a call that overwrites it can be timed.
    if (tuning_ && !problem.accumulate && tiles.size() > 1 && tuned_ < kMaxTunedProblems) {
      ++tuned_;
      choice = fastest(tiles, kind, op, problem, shapes);
    }
    chosen_.emplace(key, choice);
    return choice;
  }

 private:
  using Key = std::tuple<int, int, int, int, int, int64_t>;  // kind, device, n, k, groups, rows

  // Times every tile on the call's operands: a warm-up, then kTimedRepeats launches back to back, in
  // kTimedRounds rounds over the tiles. Said on stderr (one line per problem: a handful a process), for whoever
  // reads a run's speed.
  static GroupedGemmTile fastest(const std::vector<GroupedGemmTile>& tiles, GroupedGemmKind kind, std::string_view op,
                                 const GroupedGemmProblem& problem, std::string_view shapes) {
    cudaEvent_t start = nullptr, stop = nullptr;
    gpu::check(cudaEventCreate(&start), "grouped GEMM tuning: cudaEventCreate");
    gpu::check(cudaEventCreate(&stop), "grouped GEMM tuning: cudaEventCreate");
    std::vector<double> best_ms(tiles.size(), 1e30);
    for (int round = 0; round < kTimedRounds; ++round)
      for (size_t i = 0; i < tiles.size(); ++i) {
        launch_on(tiles[i], kind, op, problem, shapes);
        gpu::check(cudaEventRecord(start, gpu::stream()), "grouped GEMM tuning: cudaEventRecord");
        for (int r = 0; r < kTimedRepeats; ++r) launch_on(tiles[i], kind, op, problem, shapes);
        gpu::check(cudaEventRecord(stop, gpu::stream()), "grouped GEMM tuning: cudaEventRecord");
        gpu::check(cudaEventSynchronize(stop), "grouped GEMM tuning: cudaEventSynchronize");
        float total_ms = 0.0f;
        gpu::check(cudaEventElapsedTime(&total_ms, start, stop), "grouped GEMM tuning: cudaEventElapsedTime");
        best_ms[i] = std::min(best_ms[i], double(total_ms) / kTimedRepeats);
      }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    size_t best = 0;
    std::string timings;
    for (size_t i = 0; i < tiles.size(); ++i) {
      timings += fmt::format("{}{} {:.3f}", i ? ", " : "", describe(tiles[i]), best_ms[i]);
      if (i > 0 && best_ms[i] < best_ms[best] && best_ms[i] < best_ms[0] * (1.0 - kTuningMargin)) best = i;
    }
    fmt::print(stderr, "moetune: grouped GEMM {} N {} K {}, {} rows in {} groups, tuned: {} ({} ms)\n",
               kind_name(kind), problem.n, problem.k, problem.rows, problem.groups, describe(tiles[best]), timings);
    return tiles[best];
  }

  std::mutex mutex_;
  bool tuning_ = true;
  int tuned_ = 0;
  std::map<Key, GroupedGemmTile> chosen_;
};

void launch(GroupedGemmKind kind, std::string_view op, const GroupedGemmProblem& problem, std::string_view shapes,
            const GroupedGemmTile* tile) {
  launch_on(tile != nullptr ? *tile : TileChoices::instance().choose(kind, op, problem, shapes), kind, op, problem,
            shapes);
}

void grouped_matmul_impl(const GroupedGemmTile* tile, const Tensor& x, const Tensor& weights, bool transpose_w,
                         const Tensor& offsets, const Tensor& out, float alpha, bool accumulate) {
  constexpr std::string_view op = "grouped_matmul";
  check_matrix(op, "x", x, 2);
  check_matrix(op, "weights", weights, 3);
  check_matrix(op, "out", out, 2);
  check_same_device(op, {&x, &weights, &offsets, &out});
  const int64_t rows = x.size(0), groups = weights.size(0);
  const int64_t n = transpose_w ? weights.size(1) : weights.size(2);
  const int64_t k = transpose_w ? weights.size(2) : weights.size(1);
  MOETUNE_CHECK(x.size(1) == k && out.size(0) == rows && out.size(1) == n,
                "grouped_matmul: x {} · weights {}{} into out {}: shapes disagree", x.str(), weights.str(),
                transpose_w ? "ᵀ" : "", out.str());
  check_inner_size(op, "K", k);
  check_inner_size(op, "N", n);
  check_offsets(op, offsets, groups, rows);
  if (rows == 0 || groups == 0) return;  // no group has a row to write

  const GroupedGemmProblem problem{.a = x.raw_data(), .b = weights.raw_data(), .out = out.raw_data(),
                                   .offsets = static_cast<const int32_t*>(offsets.raw_data()), .rows = rows, .groups = int(groups),
                                   .n = int(n), .k = int(k), .accumulate = accumulate, .alpha = alpha};
  const std::string shapes = fmt::format("x {}, weights {}{}", x.str(), weights.str(), transpose_w ? "ᵀ" : "");
  launch(grouped_matmul_kind(transpose_w), op, problem, shapes, tile);
}

void grouped_matmul_weight_grad_impl(const GroupedGemmTile* tile, const Tensor& dy, const Tensor& x,
                                     const Tensor& offsets, const Tensor& dw, bool accumulate) {
  constexpr std::string_view op = "grouped_matmul_weight_grad";
  check_matrix(op, "dy", dy, 2);
  check_matrix(op, "x", x, 2);
  check_matrix(op, "dw", dw, 3);
  check_same_device(op, {&dy, &x, &offsets, &dw});
  const int64_t rows = x.size(0), groups = dw.size(0), n = dy.size(1), k = x.size(1);
  MOETUNE_CHECK(dy.size(0) == rows && dw.size(1) == n && dw.size(2) == k,
                "grouped_matmul_weight_grad: dy {}ᵀ · x {} into dw {}: shapes disagree", dy.str(), x.str(), dw.str());
  check_inner_size(op, "K", k);
  check_inner_size(op, "N", n);
  check_offsets(op, offsets, groups, rows);
  if (groups == 0) return;
  if (rows == 0) {  // every group is empty
    if (!accumulate) gpu::check(cudaMemsetAsync(dw.raw_data(), 0, dw.nbytes(), gpu::stream()), "zeroing dw");
    return;
  }

  const GroupedGemmProblem problem{.a = dy.raw_data(), .b = x.raw_data(), .out = dw.raw_data(),
                                   .offsets = static_cast<const int32_t*>(offsets.raw_data()), .rows = rows, .groups = int(groups),
                                   .n = int(n), .k = int(k), .accumulate = accumulate};
  launch(GroupedGemmKind::WeightGrad, op, problem, fmt::format("dy {}ᵀ, x {}", dy.str(), x.str()), tile);
}

}  // namespace

std::string describe(GroupedGemmTile tile) {
  switch (tile) {
    case GroupedGemmTile::PingPong64x256Cluster2x1: return "64x256 2x1";
    case GroupedGemmTile::PingPong64x256Cluster1x1: return "64x256 1x1";
    case GroupedGemmTile::Cooperative128x256Cluster1x1: return "cooperative 128x256 1x1";
    case GroupedGemmTile::PingPong128x128Cluster2x1: return "128x128 2x1";
  }
  return "?";
}

std::vector<GroupedGemmTile> grouped_gemm_tiles(GroupedGemmKind kind) {
  std::vector<GroupedGemmTile> tiles;
  for (const GroupedGemmKernel& kernel : kGroupedGemmKernels)
    if (kernel.kind == kind) tiles.push_back(kernel.tile);
  return tiles;
}

void grouped_matmul(const Tensor& x, const Tensor& weights, bool transpose_w, const Tensor& offsets, const Tensor& out,
                    float alpha, bool accumulate) {
  grouped_matmul_impl(nullptr, x, weights, transpose_w, offsets, out, alpha, accumulate);
}

void grouped_matmul_on(GroupedGemmTile tile, const Tensor& x, const Tensor& weights, bool transpose_w,
                       const Tensor& offsets, const Tensor& out, float alpha, bool accumulate) {
  grouped_matmul_impl(&tile, x, weights, transpose_w, offsets, out, alpha, accumulate);
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw,
                                bool accumulate) {
  grouped_matmul_weight_grad_impl(nullptr, dy, x, offsets, dw, accumulate);
}

void grouped_matmul_weight_grad_on(GroupedGemmTile tile, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                   const Tensor& dw, bool accumulate) {
  grouped_matmul_weight_grad_impl(&tile, dy, x, offsets, dw, accumulate);
}

void set_grouped_gemm_tuning(bool on) { TileChoices::instance().set_tuning(on); }

}  // namespace moetune::ops::cuda
