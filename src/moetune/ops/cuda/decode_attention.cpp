#include "moetune/ops/cuda/decode_attention.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/decode_attention_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// The checks both entry points share past their operands' own (head widths up to max_width), then the two kernels.
void run_decode_attention(std::string_view op, const Tensor& q, const Tensor& k, const void* v, DecodeAttentionShape s,
                          int64_t max_width, double scale, const Tensor& out, const Tensor& sinks) {
  MOETUNE_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "{}: {} query heads cannot share {} key/value heads", op,
                s.heads, s.kv_heads);
  MOETUNE_CHECK(s.head_dim > 0 && s.head_dim <= max_width && s.v_head_dim > 0 && s.v_head_dim <= max_width,
                "{}: head widths {} (q, k) and {} (v) must lie in [1, {}]", op, s.head_dim, s.v_head_dim, max_width);
  MOETUNE_CHECK(s.keys >= s.queries, "{}: {} new tokens but only {} keys (the keys include the new tokens')", op,
                s.queries, s.keys);
  check_gpu_tensor(op, "out", out, DType::BF16, {s.queries, s.heads, s.v_head_dim});
  MOETUNE_CHECK(s.window >= 0, "{}: sliding window {} (0 for none)", op, s.window);
  if (sinks.defined()) {
    check_gpu_tensor(op, "sinks", sinks, {DType::F32, DType::BF16});
    check_shape(op, "sinks", sinks, {s.heads});
  }
  if (s.queries == 0) return;
  check_fits_int32(op, "keys", s.keys);
  set_decode_splits(s);
  // Freed (stream-ordered) when this returns, after the kernels that use it are queued.
  Tensor partial_out = Tensor::empty({s.queries, s.heads, s.splits, s.v_head_dim}, DType::F32, Device::cuda());
  Tensor partial_stats = Tensor::empty({s.queries, s.heads, s.splits, 2}, DType::F32, Device::cuda());
  gpu::check(launch_decode_attention(q.raw_data(), k.raw_data(), v, out.raw_data(), device_data<float>(partial_out),
                                     device_data<float>(partial_stats), device_data<void>(sinks),
                                     sinks.defined() && sinks.dtype() == DType::BF16, s, float(scale), gpu::stream()),
             "decode attention kernels");
}

}  // namespace

void decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                              int64_t window, const Tensor& sinks) {
  constexpr std::string_view op = "decode_attention_forward";
  check_gpu_tensor(op, "q", q, {DType::BF16});
  check_gpu_tensor(op, "k", k, {DType::BF16});
  check_gpu_tensor(op, "v", v, {DType::BF16});
  MOETUNE_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
                "{}: q {} must be [n, heads, d], k {} [L, kv_heads, d] and v {} [L, kv_heads, dv]", op, q.str(),
                k.str(), v.str());
  const DecodeAttentionShape s{.queries = q.size(0),
                               .keys = k.size(0),
                               .heads = q.size(1),
                               .kv_heads = k.size(1),
                               .head_dim = q.size(2),
                               .v_head_dim = v.size(2),
                               .v_row_stride = v.size(2),
                               .window = window};
  check_shape(op, "k", k, {s.keys, s.kv_heads, s.head_dim});
  check_shape(op, "v", v, {s.keys, s.kv_heads, s.v_head_dim});
  run_decode_attention(op, q, k, v.raw_data(), s, kDecodeMaxHeadDim, scale, out, sinks);
}

void decode_latent_attention_forward(const Tensor& q, const Tensor& cache, int64_t value_width, double scale,
                                     const Tensor& out) {
  constexpr std::string_view op = "decode_latent_attention_forward";
  check_gpu_tensor(op, "q", q, {DType::BF16});
  check_gpu_tensor(op, "cache", cache, {DType::BF16});
  MOETUNE_CHECK(q.dim() == 3 && cache.dim() == 2 && cache.size(1) == q.size(2),
                "{}: q {} must be [n, heads, d] and the cache {} [L, d]", op, q.str(), cache.str());
  MOETUNE_CHECK(value_width > 0 && value_width <= cache.size(1), "{}: values of width {} in cache rows of {}", op,
                value_width, cache.size(1));
  const DecodeAttentionShape s{.queries = q.size(0),
                               .keys = cache.size(0),
                               .heads = q.size(1),
                               .kv_heads = 1,
                               .head_dim = q.size(2),
                               .v_head_dim = value_width,
                               .v_row_stride = q.size(2)};
  run_decode_attention(op, q, cache, cache.raw_data(), s, kDecodeMaxLatentDim, scale, out, {});
}

}  // namespace moetune::ops::cuda
