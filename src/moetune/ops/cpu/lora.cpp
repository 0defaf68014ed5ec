#include <cblas.h>

#include "moetune/ops/lora.h"

namespace moetune::ops {
namespace {

// C [m, n] (leading dimension ldc) += alpha · op(A) op(B): the row-major GEMM every product here is.
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace

Tensor lora_forward(const Tensor& x, const Tensor& a, const Tensor& b, double scale, const Tensor& y, int64_t first_column) {
  const int64_t rows = x.size(0), in = x.size(1), rank = a.size(0), cols = b.size(0), out = y.size(1);
  MOETUNE_CHECK(a.size(1) == in && b.size(1) == rank && first_column + cols <= out && y.size(0) == rows,
                "lora_forward: x {}, A {}, B {}, y {}, first column {}", x.str(), a.str(), b.str(), y.str(), first_column);
  Tensor u = Tensor::empty({rows, rank}, DType::F32);
  gemm(false, true, rows, rank, in, 1.0f, x.data<float>(), in, a.data<float>(), in, 0.0f, u.data<float>(), rank);
  gemm(false, true, rows, cols, rank, float(scale), u.data<float>(), rank, b.data<float>(), rank, 1.0f,
       y.data<float>() + first_column, out);
  return u;
}

void lora_backward(const Tensor& dy, int64_t first_column, const Tensor& x, const Tensor& u, const Tensor& a,
                   const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& dx) {
  const int64_t rows = x.size(0), in = x.size(1), rank = a.size(0), cols = b.size(0), out = dy.size(1);
  const float* g = dy.data<float>() + first_column;  // [rows, cols] with leading dimension `out`
  if (db.defined())  // dB += scale · gᵀ u
    gemm(true, false, cols, rank, rows, float(scale), g, out, u.data<float>(), rank, 1.0f, db.data<float>(), rank);
  Tensor du = Tensor::empty({rows, rank}, DType::F32);  // scale · g B
  gemm(false, false, rows, rank, cols, float(scale), g, out, b.data<float>(), rank, 0.0f, du.data<float>(), rank);
  if (da.defined())  // dA += duᵀ x
    gemm(true, false, rank, in, rows, 1.0f, du.data<float>(), rank, x.data<float>(), in, 1.0f, da.data<float>(), in);
  gemm(false, false, rows, in, rank, 1.0f, du.data<float>(), rank, a.data<float>(), in, 1.0f, dx.data<float>(), in);
}

Tensor lora_dropout_apply(const Tensor& x, const LoraDropout& dropout) {
  MOETUNE_CHECK(x.dtype() == DType::F32, "lora_dropout_apply: x {} must be f32", x.str());
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = dropout.apply(uint64_t(i), in[i]);
  return out;
}

void lora_dropout_add(const Tensor& src, const LoraDropout& dropout, const Tensor& dst) {
  MOETUNE_CHECK(src.dtype() == DType::F32 && dst.dtype() == DType::F32 && src.numel() == dst.numel(),
                "lora_dropout_add: src {} and dst {} must be f32 of one size", src.str(), dst.str());
  const float* in = src.data<float>();
  float* o = dst.data<float>();
  for (int64_t i = 0; i < src.numel(); ++i) o[i] += dropout.apply(uint64_t(i), in[i]);
}

Tensor expert_lora_b(const Tensor& packed, int64_t expert, int64_t experts) {
  const int64_t out = packed.size(0), rank = packed.size(1) / experts;
  Tensor one = Tensor::empty({out, rank}, DType::F32);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < rank; ++k)
      one.data<float>()[o * rank + k] = packed.data<float>()[o * rank * experts + k * experts + expert];
  return one;
}

void add_expert_lora_b(const Tensor& packed, const Tensor& one, int64_t expert, int64_t experts) {
  const int64_t out = packed.size(0), rank = packed.size(1) / experts;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < rank; ++k)
      packed.data<float>()[o * rank * experts + k * experts + expert] += one.data<float>()[o * rank + k];
}

Tensor lora_grouped_forward(const Tensor& rows, const std::vector<int64_t>& offsets, const Tensor& a, const Tensor& b,
                            double scale, const Tensor& y) {
  const int64_t experts = int64_t(offsets.size()) - 1, rank = a.size(0) / experts;
  MOETUNE_CHECK(a.size(0) == rank * experts && b.size(1) == rank * experts && a.size(1) == rows.size(1) &&
                    b.size(0) == y.size(1),
                "lora_grouped_forward: rows {}, A {}, B {}, y {} for {} experts", rows.str(), a.str(), b.str(), y.str(), experts);
  Tensor u = Tensor::zeros({rows.size(0), rank}, DType::F32);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    Tensor ue = lora_forward(rows.narrow(first, count), a.narrow(e * rank, rank), expert_lora_b(b, e, experts), scale,
                             y.narrow(first, count), 0);
    u.narrow(first, count).copy_from(ue);
  }
  return u;
}

void lora_grouped_backward(const Tensor& dy, const Tensor& rows, const Tensor& u, const std::vector<int64_t>& offsets,
                           const Tensor& a, const Tensor& b, double scale, const Tensor& da, const Tensor& db,
                           const Tensor& drows) {
  const int64_t experts = int64_t(offsets.size()) - 1, rank = a.size(0) / experts;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    Tensor db_e = db.defined() ? Tensor::zeros({b.size(0), rank}, DType::F32) : Tensor();
    lora_backward(dy.narrow(first, count), 0, rows.narrow(first, count), u.narrow(first, count), a.narrow(e * rank, rank),
                  expert_lora_b(b, e, experts), scale, da.defined() ? da.narrow(e * rank, rank) : Tensor(), db_e,
                  drows.narrow(first, count));
    if (db.defined()) add_expert_lora_b(db, db_e, e, experts);
  }
}

}  // namespace moetune::ops
