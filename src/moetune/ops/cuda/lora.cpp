#include "moetune/ops/cuda/lora.h"

#include <algorithm>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/lora_kernels.h"

namespace moetune::ops::cuda {
namespace {

Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }

// A bf16 GPU matrix: rows = dim 0, the other dimensions folded into its width.
int64_t width_of(std::string_view op, std::string_view name, const Tensor& t) {
  check_gpu_tensor(op, name, t, {DType::BF16});
  MOETUNE_CHECK(t.dim() >= 2, "{}: {} {} must be a matrix", op, name, t.str());
  return t.numel() / std::max<int64_t>(1, t.size(0));
}

// A move between a narrow [rows, cols] matrix and the columns [first, first + cols) of a wide [rows, width] one.
struct ColumnMove {
  int64_t rows, cols, width;
};

ColumnMove column_move(std::string_view op, const Tensor& narrow, const Tensor& wide, int64_t first) {
  const ColumnMove m{narrow.size(0), width_of(op, "the narrow matrix", narrow), width_of(op, "the wide matrix", wide)};
  MOETUNE_CHECK(wide.size(0) == m.rows, "{}: {} and {} differ in rows", op, narrow.str(), wide.str());
  MOETUNE_CHECK(first >= 0 && first + m.cols <= m.width, "{}: columns [{}, {}) of a {}-wide matrix", op, first,
                first + m.cols, m.width);
  return m;
}

// dst = scale · src[:, first:first+cols].
void copy_scaled_columns(const Tensor& src, double scale, const Tensor& dst, int64_t first) {
  const ColumnMove m = column_move("copy_scaled_columns", dst, src, first);
  gpu::check(launch_copy_scaled_columns(src.raw_data(), float(scale), dst.raw_data(), m.rows, m.cols, m.width, first,
                                        gpu::stream()),
             "copy_scaled_columns");
}

// The experts and the rank of an expert adapter: A [E·r, in], B [out, r·E].
int64_t expert_rank(std::string_view op, const Tensor& offsets, const Tensor& a, const Tensor& b) {
  check_gpu_tensor(op, "offsets", offsets, {DType::I32});
  const int64_t experts = offsets.numel() - 1;
  MOETUNE_CHECK(experts > 0 && a.dim() == 2 && b.dim() == 2 && a.size(0) % experts == 0 && b.size(1) == a.size(0),
                "{}: A {} and B {} are not the packed adapters of {} experts", op, a.str(), b.str(), experts);
  return a.size(0) / experts;
}

}  // namespace

void add_scaled_columns(const Tensor& src, double scale, const Tensor& dst, int64_t first) {
  const ColumnMove m = column_move("add_scaled_columns", src, dst, first);
  gpu::check(launch_add_scaled_columns(src.raw_data(), float(scale), dst.raw_data(), m.rows, m.cols, m.width, first,
                                       gpu::stream()),
             "add_scaled_columns");
}

Tensor lora_dropout_apply(const Tensor& x, const LoraDropout& dropout) {
  check_gpu_tensor("lora_dropout_apply", "x", x, {DType::BF16});
  Tensor out = device_like(x.shape());
  gpu::check(launch_lora_dropout_apply(x.raw_data(), dropout, out.raw_data(), x.numel(), gpu::stream()), "lora_dropout_apply");
  return out;
}

void lora_dropout_add(const Tensor& src, const LoraDropout& dropout, const Tensor& dst) {
  constexpr std::string_view op = "lora_dropout_add";
  check_gpu_tensor(op, "src", src, {DType::BF16});
  check_gpu_tensor(op, "dst", dst, {DType::BF16});
  MOETUNE_CHECK(src.numel() == dst.numel(), "{}: src {} and dst {} differ in size", op, src.str(), dst.str());
  gpu::check(launch_lora_dropout_add(src.raw_data(), dropout, dst.raw_data(), src.numel(), gpu::stream()), op);
}

Tensor expert_b_grouped(const Tensor& packed, int64_t experts) {
  constexpr std::string_view op = "expert_b_grouped";
  width_of(op, "B", packed);
  MOETUNE_CHECK(packed.dim() == 2 && packed.size(1) % experts == 0, "{}: B {} is not packed over {} experts", op,
                packed.str(), experts);
  const int64_t out = packed.size(0), rank = packed.size(1) / experts;
  Tensor grouped = device_like({experts, out, rank});
  gpu::check(launch_expert_b_to_grouped(packed.raw_data(), grouped.raw_data(), experts, out, rank, gpu::stream()), op);
  return grouped;
}

Tensor lora_forward(const Tensor& x, const Tensor& a, const Tensor& b, double scale, const Tensor& y, int64_t first_column) {
  // y may be F32 where the adapter writes all of it (Qwen2-MoE's shared-expert gate logits): the GEMM's epilogue
  // adds into any output type cuBLASLt takes; a column slice goes through the bf16 column kernel.
  check_gpu_tensor("lora_forward", "y", y, {DType::BF16, DType::F32});
  MOETUNE_CHECK(y.dim() >= 2, "lora_forward: y {} must be a matrix", y.str());
  const int64_t tokens = x.size(0), cols = b.size(0), width = y.numel() / std::max<int64_t>(1, y.size(0));
  Tensor u = device_like({tokens, a.size(0)});
  matmul(x, false, a, true, u);
  if (cols == width) {
    matmul(u, false, b, true, y, float(scale), 1.0f);  // the adapter writes every column: straight into y
  } else {
    Tensor part = device_like({tokens, cols});
    matmul(u, false, b, true, part);
    add_scaled_columns(part, scale, y, first_column);
  }
  return u;
}

void lora_backward(const Tensor& dy, int64_t first_column, const Tensor& x, const Tensor& u, const Tensor& a,
                   const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& dx) {
  const int64_t tokens = dy.size(0), cols = b.size(0), width = width_of("lora_backward", "dy", dy);
  Tensor dpart = dy;
  if (cols != width) {
    dpart = device_like({tokens, cols});
    copy_scaled_columns(dy, 1.0, dpart, first_column);
  }
  if (db.defined()) matmul(dpart, true, u, false, db, float(scale), 1.0f);  // dB += s · dyᵀ u
  Tensor du = device_like({tokens, a.size(0)});
  matmul(dpart, false, b, false, du, float(scale));                         // du = s · dy B
  if (da.defined()) matmul(du, true, x, false, da, 1.0f, 1.0f);             // dA += duᵀ x
  matmul(du, false, a, false, dx, 1.0f, 1.0f);                              // dx += du A
}

Tensor lora_grouped_forward(const Tensor& rows, const Tensor& offsets, const Tensor& a, const Tensor& b, double scale,
                            const Tensor& y) {
  const int64_t rank = expert_rank("lora_grouped_forward", offsets, a, b), experts = offsets.numel() - 1;
  Tensor u = device_like({rows.size(0), rank});
  grouped_matmul(rows, a.view({experts, rank, a.size(1)}), /*transpose_w=*/true, offsets, u);
  // y_e += s · u_e B_eᵀ in the GEMM's epilogue: no [R, out] product to write, read back and add.
  grouped_matmul(u, expert_b_grouped(b, experts), /*transpose_w=*/true, offsets, y, float(scale), /*accumulate=*/true);
  return u;
}

void lora_grouped_backward(const Tensor& dy, const Tensor& rows, const Tensor& u, const Tensor& offsets, const Tensor& a,
                           const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& drows) {
  constexpr std::string_view op = "lora_grouped_backward";
  const int64_t rank = expert_rank(op, offsets, a, b), experts = offsets.numel() - 1;
  const int64_t count = rows.size(0), in = a.size(1), out = b.size(0);
  const Tensor grouped_b = expert_b_grouped(b, experts);
  if (db.defined()) {
    Tensor grouped_db = device_like({experts, out, rank});
    grouped_matmul_weight_grad(dy, u, offsets, grouped_db, /*accumulate=*/false);  // dB_e = dy_eᵀ u_e
    gpu::check(launch_add_grouped_to_expert_b(grouped_db.raw_data(), float(scale), db.raw_data(), experts, out, rank,
                                              gpu::stream()),
               op);
  }
  Tensor du = device_like({count, rank});
  grouped_matmul(dy, grouped_b, /*transpose_w=*/false, offsets, du, float(scale));  // du_e = s · dy_e B_e
  if (da.defined()) grouped_matmul_weight_grad(du, rows, offsets, da.view({experts, rank, in}), /*accumulate=*/true);
  // drows_e += du_e A_e in the GEMM's epilogue.
  grouped_matmul(du, a.view({experts, rank, in}), /*transpose_w=*/false, offsets, drows, 1.0f, /*accumulate=*/true);
}

}  // namespace moetune::ops::cuda
