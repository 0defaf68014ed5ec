// cuDNN SDPA graphs over token-major [T, heads, width] arrays. Every tensor cuDNN sees is viewed as [batch, heads,
// max_length, width]: in the ragged layout batch entry b is document b, found through a ragged offset (in
// elements) and masked to its length by the padding mask; in the rows layout entry b is simply row b (the
// strides alone find it). The causal mask is aligned top-left within each entry. The softmax statistics use the
// same layout with width 1, i.e. F32 [T, heads] (attention_sinks.h reads them so).
// The frontend keeps its serialisation (and its own copy of nlohmann::json) behind this switch; the engine has
// its own json library and never serialises graphs.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "moetune/ops/cuda/attention_graph.h"

#include <algorithm>
#include <bit>
#include <climits>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/attention_offsets_kernels.h"
#include "moetune/ops/cuda/cudnn_handle.h"

namespace moetune::ops::cuda::attention_graph {
namespace {

namespace fe = cudnn_frontend;
using TensorAttributes = std::shared_ptr<fe::graph::Tensor_attributes>;

constexpr int64_t kTokenGranularity = 128;
constexpr size_t kScratchAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

bool ragged(const GraphKey& key) { return key.layout == Layout::kRagged; }
bool reads_lengths(const GraphKey& key) { return ragged(key) || key.padding_mask; }

// ---- graph construction ----

// head_stride: elements from one head to the next within a token (0: width, packed); a token holds heads of them.
fe::graph::Tensor_attributes& laid_out(fe::graph::Tensor_attributes& t, const GraphKey& key, int64_t heads,
                                       int64_t width, const TensorAttributes& offsets, int64_t head_stride = 0) {
  const int64_t stride = head_stride > 0 ? head_stride : width;
  t.set_dim({key.batch, heads, key.max_length, width});
  if (key.layout == Layout::kHeadMajor) {
    MOETUNE_CHECK(stride == width, "flash attention: the head-major layout takes packed heads only ({})", describe(key));
    return t.set_stride({heads * key.max_length * width, key.max_length * width, width, 1});
  }
  t.set_stride({key.max_length * heads * stride, stride, heads * stride, 1});
  return ragged(key) ? t.set_ragged_offset(offsets) : t;
}

TensorAttributes input(fe::graph::Graph& graph, const char* name, Uid uid, const GraphKey& key, int64_t heads,
                       int64_t width, const TensorAttributes& offsets, fe::DataType_t type, int64_t head_stride = 0) {
  fe::graph::Tensor_attributes t;
  t.set_name(name).set_uid(uid).set_data_type(type);
  return graph.tensor(laid_out(t, key, heads, width, offsets, head_stride));
}

void output(const TensorAttributes& t, const char* name, Uid uid, const GraphKey& key, int64_t heads, int64_t width,
            const TensorAttributes& offsets, fe::DataType_t type, int64_t head_stride = 0) {
  t->set_name(name).set_uid(uid).set_output(true).set_data_type(type);
  laid_out(*t, key, heads, width, offsets, head_stride);
}

// The per-call inputs both graphs read besides the activations: the scale (a host scalar, so that it is not
// part of the key), the document lengths (with the padding mask) and the ragged offsets (ragged layout).
struct CallInputs {
  TensorAttributes scale, seq_len_q, seq_len_kv, q_offsets, k_offsets, v_offsets, o_offsets, stats_offsets;
};

CallInputs call_inputs(fe::graph::Graph& graph, const GraphKey& key) {
  auto column = [&](const char* name, Uid uid, int64_t rows, fe::DataType_t type) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim({rows, 1, 1, 1})
                            .set_stride({1, 1, 1, 1})
                            .set_data_type(type));
  };
  CallInputs in;
  in.scale = graph.tensor(fe::graph::Tensor_attributes()
                              .set_name("attn_scale")
                              .set_uid(kScale)
                              .set_dim({1, 1, 1, 1})
                              .set_stride({1, 1, 1, 1})
                              .set_is_pass_by_value(true)
                              .set_data_type(fe::DataType_t::FLOAT));
  if (key.padding_mask) {
    in.seq_len_q = column("seq_len_q", kSeqLenQ, key.batch, fe::DataType_t::INT32);
    in.seq_len_kv = column("seq_len_kv", kSeqLenKv, key.batch, fe::DataType_t::INT32);
  }
  if (ragged(key)) {
    in.q_offsets = column("q_offsets", kQOffsets, key.batch + 1, fe::DataType_t::INT64);
    in.k_offsets = column("k_offsets", kKOffsets, key.batch + 1, fe::DataType_t::INT64);
    in.v_offsets = column("v_offsets", kVOffsets, key.batch + 1, fe::DataType_t::INT64);
    in.o_offsets = column("o_offsets", kOOffsets, key.batch + 1, fe::DataType_t::INT64);
    in.stats_offsets = column("stats_offsets", kStatsOffsets, key.batch + 1, fe::DataType_t::INT64);
  }
  return in;
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The masks both directions share: causal (top-left within each entry), the sliding window, the padding mask.
template <class Attributes>
void set_masks(Attributes& options, const GraphKey& key, const CallInputs& in) {
  options.set_attn_scale(in.scale)
      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
      .set_diagonal_band_right_bound(0);
  if (key.padding_mask) options.set_padding_mask(true).set_seq_len_q(in.seq_len_q).set_seq_len_kv(in.seq_len_kv);
  if (key.window > 0) options.set_diagonal_band_left_bound(int(key.window));  // keeps kv > q - window
}

constexpr auto kBf16 = fe::DataType_t::BFLOAT16;

// A new graph with its per-call inputs and q, k and v: what both directions start from.
struct Inputs {
  std::shared_ptr<fe::graph::Graph> graph;
  CallInputs in;
  TensorAttributes q, k, v;
};

Inputs inputs(const GraphKey& key) {
  Inputs x{new_graph(), {}, {}, {}, {}};
  x.in = call_inputs(*x.graph, key);
  x.q = input(*x.graph, "q", kQ, key, key.heads, key.head_dim, x.in.q_offsets, kBf16);
  x.k = input(*x.graph, "k", kK, key, key.kv_heads, key.head_dim, x.in.k_offsets, kBf16);
  x.v = input(*x.graph, "v", kV, key, key.kv_heads, key.v_head_dim, x.in.v_offsets, kBf16, key.v_head_stride);
  return x;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphKey& key) {
  auto [graph, in, q, k, v] = inputs(key);
  auto options = fe::graph::SDPA_attributes().set_name("causal_attention").set_generate_stats(true);
  set_masks(options, key, in);
  auto [o, stats] = graph->sdpa(q, k, v, options);
  output(o, "o", kO, key, key.heads, key.v_head_dim, in.o_offsets, kBf16);
  output(stats, "stats", kStats, key, key.heads, 1, in.stats_offsets, fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphKey& key) {
  auto [graph, in, q, k, v] = inputs(key);
  const int64_t d = key.head_dim, dv = key.v_head_dim;
  const auto bf16 = kBf16;
  auto o = input(*graph, "o", kO, key, key.heads, dv, in.o_offsets, bf16);
  auto dout = input(*graph, "dout", kDO, key, key.heads, dv, in.o_offsets, bf16);
  auto stats = input(*graph, "stats", kStats, key, key.heads, 1, in.stats_offsets, fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes().set_name("causal_attention_backward");
  set_masks(options, key, in);
  // max_total_seq_len sizes cuDNN's fp32 dQ (and GQA dK/dV) accumulators by the tokens present rather than by
  // batch × max_length, which would be far larger for many short documents.
  if (ragged(key) && key.max_total_seq_len)
    options.set_max_total_seq_len_q(key.max_tokens).set_max_total_seq_len_kv(key.max_tokens);
  if (key.deterministic) options.set_deterministic_algorithm(true);
  auto [dq, dk, dv_out] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
  output(dq, "dq", kDQ, key, key.heads, d, in.q_offsets, bf16);
  output(dk, "dk", kDK, key, key.kv_heads, d, in.k_offsets, bf16);
  output(dv_out, "dv", kDV, key, key.kv_heads, dv, in.v_offsets, bf16, key.v_head_stride);
  return graph;
}

int64_t padded_document_count(int64_t documents) {
  return int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(documents, 1))));
}

void check_window(int64_t window) {
  MOETUNE_CHECK(window >= 0 && window <= INT_MAX, "flash attention: sliding window {} must be in [0, {}]", window,
                INT_MAX);
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kRagged: return "ragged THD";
    case Layout::kRows: return "rows BSHD";
    case Layout::kHeadMajor: return "head-major BHSD";
  }
  return "?";
}

GraphKey ragged_key(bool backward, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                    int64_t v_head_dim, int64_t documents, int64_t max_document_length, int64_t window,
                    int64_t v_head_stride) {
  check_window(window);
  MOETUNE_CHECK(v_head_stride == 0 || v_head_stride >= v_head_dim,
                "flash attention: v's head stride {} is narrower than its head dim {}", v_head_stride, v_head_dim);
  return {.backward = backward,
          .heads = heads,
          .kv_heads = kv_heads,
          .head_dim = head_dim,
          .v_head_dim = v_head_dim,
          .v_head_stride = v_head_stride > 0 ? v_head_stride : v_head_dim,
          .batch = padded_document_count(documents),
          .max_length = max_document_length,
          .max_tokens = backward ? std::max<int64_t>(1, (tokens + kTokenGranularity - 1) / kTokenGranularity) *
                                       kTokenGranularity
                                 : 0,
          .window = window};
}

GraphKey rows_key(bool backward, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, int64_t rows,
                  int64_t length, int64_t window, int64_t v_head_stride) {
  GraphKey key = ragged_key(backward, 0, heads, kv_heads, head_dim, v_head_dim, 1, length, window, v_head_stride);
  key.batch = rows;
  key.max_tokens = 0;
  key.layout = Layout::kRows;
  key.padding_mask = false;
  key.max_total_seq_len = false;
  return key;
}

std::string describe(const GraphKey& key) {
  std::string options = layout_name(key.layout);
  if (key.padding_mask) options += ", padding mask";
  if (key.backward && ragged(key) && key.max_total_seq_len) options += fmt::format(", {} tokens", key.max_tokens);
  if (key.deterministic) options += ", deterministic";
  if (key.window > 0) options += fmt::format(", sliding window {}", key.window);
  if (key.v_head_stride != key.v_head_dim) options += fmt::format(", v's heads {} apart", key.v_head_stride);
  return fmt::format("{} graph for {} heads, {} kv heads, head_dim {} (v {}), {} entries of at most {} tokens ({})",
                     key.backward ? "backward" : "forward", key.heads, key.kv_heads, key.head_dim, key.v_head_dim,
                     key.batch, key.max_length, options);
}

void fail_step(std::string_view step, const GraphKey& key, const std::string& message) {
  fail("cuDNN flash attention: {} failed for the {}: {}", step, describe(key), message);
}

std::shared_ptr<fe::graph::Graph> operation_graph(const GraphKey& key) {
  MOETUNE_CHECK(ragged(key) ? key.padding_mask : true, "flash attention: the ragged layout needs the padding mask ({})",
                describe(key));
  try {
    auto graph = key.backward ? backward_graph(key) : forward_graph(key);
    check(graph->validate(), "validation", key);
    check(graph->build_operation_graph(cudnn_handle()), "building the operation graph", key);
    return graph;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the frontend throws for some failures (e.g. a library it cannot load)
    fail("cuDNN flash attention: building the {} threw: {}", describe(key), e.what());
  }
}

// Two sets of lengths and offsets: q/k (and the statistics) by q/k's head dim, v and the output by v's.
size_t inputs_bytes(const GraphKey& key) {
  if (!reads_lengths(key)) return 0;
  return 2 * (3 * aligned(size_t(key.batch + 1) * sizeof(int64_t)) + aligned(size_t(key.batch) * sizeof(int32_t)));
}

void add_call_inputs(const GraphKey& key, const PackedDocuments& docs, float& scale_value, void* scratch,
                     VariantPack& pack) {
  pack[kScale] = &scale_value;
  if (!reads_lengths(key)) return;
  MOETUNE_CHECK(ragged(key) || docs.num_documents == key.batch,
                "flash attention: {} documents for the {}: the rows layout needs one a row", docs.num_documents,
                describe(key));
  char* base = static_cast<char*>(scratch);
  const size_t offsets_array = aligned(size_t(key.batch + 1) * sizeof(int64_t));
  auto offsets_at = [&](char* at) {
    return RaggedOffsets{.lengths = reinterpret_cast<int32_t*>(at + 3 * offsets_array),
                         .q_offsets = reinterpret_cast<int64_t*>(at),
                         .kv_offsets = reinterpret_cast<int64_t*>(at + offsets_array),
                         .stats_offsets = reinterpret_cast<int64_t*>(at + 2 * offsets_array)};
  };
  const auto* cu_seqlens = static_cast<const int32_t*>(docs.cu_seqlens.raw_data());
  const RaggedOffsets offsets = offsets_at(base);
  gpu::check(launch_ragged_offsets(cu_seqlens, docs.num_documents, key.batch, key.heads * key.head_dim,
                                   key.kv_heads * key.head_dim, key.heads, offsets, gpu::stream()),
             fmt::format("ragged offsets for the {}", describe(key)));
  // The output by v's head dim and v by its head stride (the same offsets as q's and k's when both agree).
  const bool same = key.v_head_dim == key.head_dim && key.v_head_stride == key.head_dim;
  const RaggedOffsets v_offsets = offsets_at(base + inputs_bytes(key) / 2);
  if (ragged(key) && !same)
    gpu::check(launch_ragged_offsets(cu_seqlens, docs.num_documents, key.batch, key.heads * key.v_head_dim,
                                     key.kv_heads * key.v_head_stride, key.heads, v_offsets, gpu::stream()),
               fmt::format("v's ragged offsets for the {}", describe(key)));
  if (key.padding_mask) {
    pack[kSeqLenQ] = offsets.lengths;
    pack[kSeqLenKv] = offsets.lengths;
  }
  if (ragged(key)) {
    pack[kQOffsets] = offsets.q_offsets;
    pack[kOOffsets] = same ? offsets.q_offsets : v_offsets.q_offsets;
    pack[kKOffsets] = offsets.kv_offsets;
    pack[kVOffsets] = same ? offsets.kv_offsets : v_offsets.kv_offsets;
    pack[kStatsOffsets] = offsets.stats_offsets;
  }
}

}  // namespace moetune::ops::cuda::attention_graph
