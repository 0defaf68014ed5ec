#include "moetune/ops/cuda/lora_stacked.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

constexpr size_t kBf16 = 2;

int64_t rank_of(const std::vector<StackedPiece>& pieces) {
  MOETUNE_CHECK(!pieces.empty(), "stacked LoRA: no adapters");
  const int64_t rank = pieces.front().a.size(0), in = pieces.front().a.size(1);
  for (const StackedPiece& p : pieces) {
    check_gpu_tensor("stacked LoRA", "A", p.a, {DType::BF16});
    check_gpu_tensor("stacked LoRA", "B", p.b, {DType::BF16});
    MOETUNE_CHECK(p.a.dim() == 2 && p.a.size(0) == rank && p.a.size(1) == in && p.b.dim() == 2 && p.b.size(1) == rank,
                  "stacked LoRA: A {} and B {} do not share the first adapter's rank {} and input {}", p.a.str(),
                  p.b.str(), rank, in);
  }
  return rank;
}

// dst[rows, cols] (row pitch dst_pitch elements) = src[rows, cols] (pitch src_pitch), bf16, on the stream.
void copy_block(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows, int64_t cols) {
  gpu::copy_rows(dst, size_t(dst_pitch) * kBf16, src, size_t(src_pitch) * kBf16, size_t(cols) * kBf16, size_t(rows),
                 "stacked LoRA copy");
}

}  // namespace

Tensor stack_a(const std::vector<StackedPiece>& pieces) {
  const int64_t rank = rank_of(pieces), in = pieces.front().a.size(1);
  Tensor stack = Tensor::empty({int64_t(pieces.size()) * rank, in}, DType::BF16, Device::cuda());
  for (size_t j = 0; j < pieces.size(); ++j)
    copy_block(stack.narrow(int64_t(j) * rank, rank).raw_data(), in, pieces[j].a.raw_data(), in, rank, in);
  return stack;
}

Tensor block_diagonal_b(const std::vector<StackedPiece>& pieces, int64_t width) {
  const int64_t rank = rank_of(pieces), stacked = int64_t(pieces.size()) * rank;
  Tensor diagonal = Tensor::zeros({width, stacked}, DType::BF16, Device::cuda());
  for (size_t j = 0; j < pieces.size(); ++j) {
    const StackedPiece& p = pieces[j];
    MOETUNE_CHECK(p.first_column >= 0 && p.first_column + p.b.size(0) <= width, "stacked LoRA: columns [{}, {}) of {}",
                  p.first_column, p.first_column + p.b.size(0), width);
    copy_block(static_cast<uint16_t*>(diagonal.raw_data()) + p.first_column * stacked + int64_t(j) * rank, stacked,
               p.b.raw_data(), rank, p.b.size(0), rank);
  }
  return diagonal;
}

Tensor lora_stacked_forward(const Tensor& x, const Tensor& a_stack, const Tensor& b_diagonal, double scale, const Tensor& y) {
  Tensor u = Tensor::empty({x.size(0), a_stack.size(0)}, DType::BF16, Device::cuda());
  matmul(x, false, a_stack, true, u);
  matmul(u, false, b_diagonal, true, y, float(scale), 1.0f);  // straight into y: no temporary, no extra pass
  return u;
}

void lora_stacked_backward(const Tensor& dy, const Tensor& x, const Tensor& u, const std::vector<StackedPiece>& pieces,
                           const Tensor& a_stack, const Tensor& b_diagonal, double scale,
                           const std::vector<Tensor>& a_grads, const std::vector<Tensor>& b_grads, const Tensor& dx) {
  const int64_t rank = rank_of(pieces), stacked = a_stack.size(0);
  Tensor du = Tensor::empty({dy.size(0), stacked}, DType::BF16, Device::cuda());
  matmul(dy, false, b_diagonal, false, du, float(scale));  // du = s · dy B_diag: dy read once
  bool any_a = false, any_b = false;
  for (size_t j = 0; j < pieces.size(); ++j) {
    any_a = any_a || a_grads[j].defined();
    any_b = any_b || b_grads[j].defined();
  }
  if (any_a) {
    Tensor da = Tensor::empty(a_stack.shape(), DType::BF16, Device::cuda());
    matmul(du, true, x, false, da);  // duᵀ x: adapter j's dA in rows [j·r, (j+1)·r)
    for (size_t j = 0; j < pieces.size(); ++j)
      if (a_grads[j].defined()) add(a_grads[j], da.narrow(int64_t(j) * rank, rank), a_grads[j]);
  }
  if (any_b) {
    Tensor db = Tensor::empty(b_diagonal.shape(), DType::BF16, Device::cuda());
    matmul(dy, true, u, false, db, float(scale));  // s · dyᵀ u: adapter j's dB is its diagonal block
    for (size_t j = 0; j < pieces.size(); ++j) {
      if (!b_grads[j].defined()) continue;
      const StackedPiece& p = pieces[j];
      Tensor block = Tensor::empty(p.b.shape(), DType::BF16, Device::cuda());
      copy_block(block.raw_data(), rank, static_cast<const uint16_t*>(db.raw_data()) + p.first_column * stacked + int64_t(j) * rank,
                 stacked, p.b.size(0), rank);
      add(b_grads[j], block, b_grads[j]);
    }
  }
  matmul(du, false, a_stack, false, dx, 1.0f, 1.0f);  // dx += du A_stack: one accumulation for every adapter
}

}  // namespace moetune::ops::cuda
