// cuDNN SDPA graphs over packed documents (the ragged "THD" layout), built once per shape and cached. Every tensor
// cuDNN sees is a token-major [T, heads, width] array viewed as [batch, heads, max_length, width]: batch entry b
// is document b, found through a ragged offset (in elements) and masked to its length by the padding mask; the
// causal mask is aligned top-left within each document. The softmax statistics use the same layout with width 1,
// i.e. F32 [T, heads].
// The frontend keeps its serialisation (and its own copy of nlohmann::json) behind this switch; the engine has
// its own json library and never serialises graphs.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "moetune/ops/cuda/attention.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/attention_offsets_kernels.h"
#include "moetune/ops/cuda/cudnn_handle.h"

namespace moetune::ops::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorAttributes = std::shared_ptr<fe::graph::Tensor_attributes>;

// Ids of the graphs' tensors in the variant packs; the forward and backward graphs share them.
enum Uid : fe::graph::Tensor_attributes::uid_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kScale, kSeqLenQ, kSeqLenKv, kQOffsets, kKOffsets, kVOffsets, kOOffsets, kStatsOffsets,
};

// What a built graph depends on. T itself does not enter the forward graph (documents are found through the
// offsets); the backward graph sizes its fp32 accumulators by the token count, rounded so that small changes
// reuse the graph.
struct GraphKey {
  bool backward = false;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t v_head_dim = 0;  // v's and the output's (MLA's differs from q/k's)
  int64_t batch = 0;       // documents, rounded up to a power of two (the extra ones are empty)
  int64_t max_length = 0;  // the bound on a document's length
  int64_t max_tokens = 0;  // backward only: T rounded up to kTokenGranularity
  int64_t window = 0;      // sliding window (0: none)
  auto operator<=>(const GraphKey&) const = default;
};

constexpr int64_t kTokenGranularity = 128;
constexpr size_t kScratchAlignment = 256;

std::string describe(const GraphKey& key) {
  return fmt::format("{} graph for {} heads, {} kv heads, head_dim {} (v {}), {} documents of at most {} tokens{}{}",
                     key.backward ? "backward" : "forward", key.heads, key.kv_heads, key.head_dim, key.v_head_dim,
                     key.batch, key.max_length, key.backward ? fmt::format(", {} tokens", key.max_tokens) : "",
                     key.window > 0 ? fmt::format(", sliding window {}", key.window) : "");
}

void check_frontend(fe::error_t status, std::string_view step, const GraphKey& key) {
  if (status.is_bad()) fail("cuDNN flash attention: {} failed for the {}: {}", step, describe(key), status.get_message());
}

int64_t padded_document_count(int64_t documents) {
  return int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(documents, 1))));
}

GraphKey graph_key(bool backward, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                   int64_t documents, int64_t max_document_length, int64_t window) {
  MOETUNE_CHECK(window >= 0 && window <= INT_MAX, "flash attention: sliding window {} must be in [0, {}]", window,
                INT_MAX);
  return {.backward = backward,
          .heads = heads,
          .kv_heads = kv_heads,
          .head_dim = head_dim,
          .v_head_dim = v_head_dim,
          .batch = padded_document_count(documents),
          .max_length = max_document_length,
          .max_tokens = backward ? std::max<int64_t>(1, (tokens + kTokenGranularity - 1) / kTokenGranularity) *
                                       kTokenGranularity
                                 : 0,
          .window = window};
}

// ---- graph construction ----

fe::graph::Tensor_attributes& packed_layout(fe::graph::Tensor_attributes& t, const GraphKey& key, int64_t heads,
                                            int64_t width, const TensorAttributes& offsets) {
  return t.set_dim({key.batch, heads, key.max_length, width})
      .set_stride({key.max_length * heads * width, width, heads * width, 1})
      .set_ragged_offset(offsets);
}

TensorAttributes packed_input(fe::graph::Graph& graph, const char* name, Uid uid, const GraphKey& key, int64_t heads,
                              int64_t width, const TensorAttributes& offsets, fe::DataType_t type) {
  fe::graph::Tensor_attributes t;
  t.set_name(name).set_uid(uid).set_data_type(type);
  return graph.tensor(packed_layout(t, key, heads, width, offsets));
}

void packed_output(const TensorAttributes& t, const char* name, Uid uid, const GraphKey& key, int64_t heads,
                   int64_t width, const TensorAttributes& offsets, fe::DataType_t type) {
  t->set_name(name).set_uid(uid).set_output(true).set_data_type(type);
  packed_layout(*t, key, heads, width, offsets);
}

// The per-call inputs both graphs read besides the activations: the scale (a host scalar, so that it is not
// part of the key), the document lengths and the ragged offsets.
struct RaggedInputs {
  TensorAttributes scale, seq_len_q, seq_len_kv, q_offsets, k_offsets, v_offsets, o_offsets, stats_offsets;
};

RaggedInputs ragged_inputs(fe::graph::Graph& graph, const GraphKey& key) {
  auto column = [&](const char* name, Uid uid, int64_t rows, fe::DataType_t type) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim({rows, 1, 1, 1})
                            .set_stride({1, 1, 1, 1})
                            .set_data_type(type));
  };
  RaggedInputs in;
  in.scale = graph.tensor(fe::graph::Tensor_attributes()
                              .set_name("attn_scale")
                              .set_uid(kScale)
                              .set_dim({1, 1, 1, 1})
                              .set_stride({1, 1, 1, 1})
                              .set_is_pass_by_value(true)
                              .set_data_type(fe::DataType_t::FLOAT));
  in.seq_len_q = column("seq_len_q", kSeqLenQ, key.batch, fe::DataType_t::INT32);
  in.seq_len_kv = column("seq_len_kv", kSeqLenKv, key.batch, fe::DataType_t::INT32);
  in.q_offsets = column("q_offsets", kQOffsets, key.batch + 1, fe::DataType_t::INT64);
  in.k_offsets = column("k_offsets", kKOffsets, key.batch + 1, fe::DataType_t::INT64);
  in.v_offsets = column("v_offsets", kVOffsets, key.batch + 1, fe::DataType_t::INT64);
  in.o_offsets = column("o_offsets", kOOffsets, key.batch + 1, fe::DataType_t::INT64);
  in.stats_offsets = column("stats_offsets", kStatsOffsets, key.batch + 1, fe::DataType_t::INT64);
  return in;
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphKey& key) {
  auto graph = new_graph();
  const RaggedInputs in = ragged_inputs(*graph, key);
  const int64_t d = key.head_dim;
  const auto bf16 = fe::DataType_t::BFLOAT16;
  auto q = packed_input(*graph, "q", kQ, key, key.heads, d, in.q_offsets, bf16);
  auto k = packed_input(*graph, "k", kK, key, key.kv_heads, d, in.k_offsets, bf16);
  auto v = packed_input(*graph, "v", kV, key, key.kv_heads, key.v_head_dim, in.v_offsets, bf16);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_attn_scale(in.scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(in.seq_len_q)
                     .set_seq_len_kv(in.seq_len_kv)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  if (key.window > 0) options.set_diagonal_band_left_bound(int(key.window));  // keeps kv > q - window
  auto [o, stats] = graph->sdpa(q, k, v, options);
  packed_output(o, "o", kO, key, key.heads, key.v_head_dim, in.o_offsets, bf16);
  packed_output(stats, "stats", kStats, key, key.heads, 1, in.stats_offsets, fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphKey& key) {
  auto graph = new_graph();
  const RaggedInputs in = ragged_inputs(*graph, key);
  const int64_t d = key.head_dim;
  const auto bf16 = fe::DataType_t::BFLOAT16;
  auto q = packed_input(*graph, "q", kQ, key, key.heads, d, in.q_offsets, bf16);
  auto k = packed_input(*graph, "k", kK, key, key.kv_heads, d, in.k_offsets, bf16);
  const int64_t dv = key.v_head_dim;
  auto v = packed_input(*graph, "v", kV, key, key.kv_heads, dv, in.v_offsets, bf16);
  auto o = packed_input(*graph, "o", kO, key, key.heads, dv, in.o_offsets, bf16);
  auto dout = packed_input(*graph, "dout", kDO, key, key.heads, dv, in.o_offsets, bf16);
  auto stats = packed_input(*graph, "stats", kStats, key, key.heads, 1, in.stats_offsets, fe::DataType_t::FLOAT);
  // max_total_seq_len sizes cuDNN's fp32 dQ (and GQA dK/dV) accumulators by the tokens present rather than by
  // batch × max_length, which would be far larger for many short documents.
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_attn_scale(in.scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(in.seq_len_q)
                     .set_seq_len_kv(in.seq_len_kv)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_max_total_seq_len_q(key.max_tokens)
                     .set_max_total_seq_len_kv(key.max_tokens);
  if (key.window > 0) options.set_diagonal_band_left_bound(int(key.window));
  auto [dq, dk, dv_out] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
  packed_output(dq, "dq", kDQ, key, key.heads, d, in.q_offsets, bf16);
  packed_output(dk, "dk", kDK, key, key.kv_heads, d, in.k_offsets, bf16);
  packed_output(dv_out, "dv", kDV, key, key.kv_heads, dv, in.v_offsets, bf16);
  return graph;
}

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  size_t workspace_bytes = 0;
};

BuiltGraph build(const GraphKey& key) {
  const cudnnHandle_t handle = cudnn_handle();
  try {
    auto graph = key.backward ? backward_graph(key) : forward_graph(key);
    check_frontend(graph->validate(), "validation", key);
    check_frontend(graph->build_operation_graph(handle), "building the operation graph", key);
    check_frontend(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                   "creating execution plans", key);
    check_frontend(graph->check_support(), "the support check", key);
    check_frontend(graph->build_plans(), "building the plans", key);
    int64_t workspace = 0;
    check_frontend(graph->get_workspace_size(workspace), "the workspace query", key);
    return {std::move(graph), size_t(std::max<int64_t>(workspace, 0))};
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the frontend throws for some failures (e.g. a library it cannot load)
    fail("cuDNN flash attention: building the {} threw: {}", describe(key), e.what());
  }
}

const BuiltGraph& cached_graph(const GraphKey& key) {
  static std::mutex mutex;
  static std::map<GraphKey, BuiltGraph> cache;  // never evicted: a run needs a handful
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(key)).first;
  return it->second;
}

// ---- per-call scratch: lengths and offsets for the padded document count, then cuDNN's workspace ----

size_t aligned(size_t bytes) { return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

// Two sets: q/k (and the statistics) by q/k's head dim, v and the output by v's.
size_t ragged_bytes(int64_t batch) {
  return 2 * (3 * aligned(size_t(batch + 1) * sizeof(int64_t)) + aligned(size_t(batch) * sizeof(int32_t)));
}

// ---- argument checks ----

struct Shapes {
  int64_t tokens, heads, kv_heads, head_dim, v_head_dim;
};

void check_tensor(const Tensor& t, std::string_view name, const Shape& shape, DType dtype) {
  MOETUNE_CHECK(t.defined(), "flash attention: {} is undefined", name);
  MOETUNE_CHECK(t.device().is_cuda(), "flash attention: {} is {}, not on the GPU", name, t.str());
  MOETUNE_CHECK(t.dtype() == dtype && t.shape() == shape, "flash attention: {} is {}, expected {}{}", name, t.str(),
                dtype_name(dtype), shape_str(shape));
  MOETUNE_CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0,
                "flash attention: {} ({}) does not start on a 16-byte boundary, which cuDNN needs", name, t.str());
}

Shapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const PackedDocuments& docs) {
  MOETUNE_CHECK(q.defined() && q.dim() == 3, "flash attention: q must be [T, heads, head_dim], got {}",
                q.defined() ? q.str() : "undefined");
  MOETUNE_CHECK(k.defined() && k.dim() == 3, "flash attention: k must be [T, kv_heads, head_dim], got {}",
                k.defined() ? k.str() : "undefined");
  MOETUNE_CHECK(v.defined() && v.dim() == 3, "flash attention: v must be [T, kv_heads, v_head_dim], got {}",
                v.defined() ? v.str() : "undefined");
  const Shapes s{q.size(0), q.size(1), k.size(1), q.size(2), v.size(2)};
  MOETUNE_CHECK(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0,
                "flash attention: {} query heads cannot be grouped over {} key/value heads (q {}, k {})", s.heads,
                s.kv_heads, q.str(), k.str());
  MOETUNE_CHECK(s.head_dim > 0 && s.head_dim % 8 == 0 && s.head_dim <= 256,
                "flash attention: head_dim {} is not supported by cuDNN (it needs a multiple of 8, at most 256)",
                s.head_dim);
  MOETUNE_CHECK(s.v_head_dim > 0 && s.v_head_dim % 8 == 0 && s.v_head_dim <= s.head_dim,
                "flash attention: v head_dim {} is not supported (a multiple of 8, at most q/k's {})", s.v_head_dim,
                s.head_dim);
  check_tensor(q, "q", {s.tokens, s.heads, s.head_dim}, DType::BF16);
  check_tensor(k, "k", {s.tokens, s.kv_heads, s.head_dim}, DType::BF16);
  check_tensor(v, "v", {s.tokens, s.kv_heads, s.v_head_dim}, DType::BF16);
  MOETUNE_CHECK(docs.tokens == s.tokens, "flash attention: the documents cover {} tokens but q has {} ({})",
                docs.tokens, s.tokens, q.str());
  check_tensor(docs.cu_seqlens, "cu_seqlens", {docs.num_documents + 1}, DType::I32);
  MOETUNE_CHECK(s.tokens == 0 || (docs.num_documents > 0 && docs.max_document_length > 0),
                "flash attention: {} tokens in {} documents of at most {} tokens", s.tokens, docs.num_documents,
                docs.max_document_length);
  return s;
}

// Fills the lengths and offsets, then queues the graph on gpu::stream(). `pack` holds the activations.
void execute(const GraphKey& key, const PackedDocuments& docs, double scale,
             std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack) {
  const BuiltGraph& built = cached_graph(key);
  const size_t offsets_bytes = ragged_bytes(key.batch);
  // Freed (stream-ordered) when this returns, after the work that uses it has been queued.
  Tensor scratch = Tensor::empty({int64_t(offsets_bytes + built.workspace_bytes)}, DType::U8, Device::cuda());
  char* base = static_cast<char*>(scratch.raw_data());
  const size_t offsets_array = aligned(size_t(key.batch + 1) * sizeof(int64_t));
  const RaggedOffsets offsets{.lengths = reinterpret_cast<int32_t*>(base + 3 * offsets_array),
                              .q_offsets = reinterpret_cast<int64_t*>(base),
                              .kv_offsets = reinterpret_cast<int64_t*>(base + offsets_array),
                              .stats_offsets = reinterpret_cast<int64_t*>(base + 2 * offsets_array)};
  gpu::check(launch_ragged_offsets(static_cast<const int32_t*>(docs.cu_seqlens.raw_data()), docs.num_documents,
                                   key.batch, key.heads * key.head_dim, key.kv_heads * key.head_dim, key.heads,
                                   offsets, gpu::stream()),
             fmt::format("ragged offsets for the {}", describe(key)));
  // The output and v by v's head dim (the same offsets as q's and k's when the head dims agree).
  char* v_base = base + offsets_bytes / 2;
  const RaggedOffsets v_offsets{.lengths = reinterpret_cast<int32_t*>(v_base + 3 * offsets_array),
                                .q_offsets = reinterpret_cast<int64_t*>(v_base),
                                .kv_offsets = reinterpret_cast<int64_t*>(v_base + offsets_array),
                                .stats_offsets = reinterpret_cast<int64_t*>(v_base + 2 * offsets_array)};
  if (key.v_head_dim != key.head_dim)
    gpu::check(launch_ragged_offsets(static_cast<const int32_t*>(docs.cu_seqlens.raw_data()), docs.num_documents,
                                     key.batch, key.heads * key.v_head_dim, key.kv_heads * key.v_head_dim, key.heads,
                                     v_offsets, gpu::stream()),
               fmt::format("v's ragged offsets for the {}", describe(key)));
  const bool same = key.v_head_dim == key.head_dim;

  float scale_value = float(scale);  // read by the host when the plan is queued
  pack[kScale] = &scale_value;
  pack[kSeqLenQ] = offsets.lengths;
  pack[kSeqLenKv] = offsets.lengths;
  pack[kQOffsets] = offsets.q_offsets;
  pack[kOOffsets] = same ? offsets.q_offsets : v_offsets.q_offsets;
  pack[kKOffsets] = offsets.kv_offsets;
  pack[kVOffsets] = same ? offsets.kv_offsets : v_offsets.kv_offsets;
  pack[kStatsOffsets] = offsets.stats_offsets;
  check_frontend(built.graph->execute(cudnn_handle(), pack, base + offsets_bytes), "execution", key);
  gpu::check(cudaGetLastError(), fmt::format("flash attention {}", describe(key)));
}

}  // namespace

PackedDocuments pack_documents(const std::vector<int64_t>& document_start, int64_t max_document_length) {
  const int64_t tokens = int64_t(document_start.size());
  MOETUNE_CHECK(tokens <= INT32_MAX, "pack_documents: {} tokens do not fit cuDNN's 32-bit sequence offsets", tokens);
  std::vector<int32_t> cu_seqlens;
  int64_t longest = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t start = document_start[size_t(t)];
    if (start == t) {
      if (t > 0) longest = std::max<int64_t>(longest, t - cu_seqlens.back());
      cu_seqlens.push_back(int32_t(t));
      continue;
    }
    MOETUNE_CHECK(t > 0, "pack_documents: token 0 starts its document at {}", start);
    MOETUNE_CHECK(start == document_start[size_t(t - 1)],
                  "pack_documents: token {} starts its document at {} but token {} at {}: documents must be "
                  "consecutive runs of tokens",
                  t, start, t - 1, document_start[size_t(t - 1)]);
  }
  if (tokens > 0) longest = std::max<int64_t>(longest, tokens - cu_seqlens.back());
  cu_seqlens.push_back(int32_t(tokens));
  MOETUNE_CHECK(longest <= max_document_length,
                "pack_documents: a document of {} tokens is longer than max_document_length {}", longest,
                max_document_length);
  PackedDocuments docs;
  docs.num_documents = int64_t(cu_seqlens.size()) - 1;
  docs.max_document_length = max_document_length;
  docs.tokens = tokens;
  docs.cu_seqlens = Tensor::from_vector(cu_seqlens, {int64_t(cu_seqlens.size())}).to(Device::cuda());
  return docs;
}

Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const PackedDocuments& docs,
                               double scale, const Tensor& out, int64_t sliding_window) {
  const Shapes s = check_inputs(q, k, v, docs);
  check_tensor(out, "out", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  Tensor stats = Tensor::empty({s.tokens, s.heads}, DType::F32, Device::cuda());
  if (s.tokens == 0) return stats;
  const GraphKey key =
      graph_key(false, s.tokens, s.heads, s.kv_heads, s.head_dim, s.v_head_dim, docs.num_documents,
                docs.max_document_length, sliding_window);
  execute(key, docs, scale,
          {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()}, {kO, out.raw_data()},
           {kStats, stats.raw_data()}});
  return stats;
}

void causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& stats, const PackedDocuments& docs, double scale, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, int64_t sliding_window) {
  const Shapes s = check_inputs(q, k, v, docs);
  check_tensor(dout, "dout", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  check_tensor(out, "out", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  check_tensor(stats, "stats", {s.tokens, s.heads}, DType::F32);
  check_tensor(dq, "dq", q.shape(), DType::BF16);
  check_tensor(dk, "dk", k.shape(), DType::BF16);
  check_tensor(dv, "dv", v.shape(), DType::BF16);
  if (s.tokens == 0) return;
  const GraphKey key =
      graph_key(true, s.tokens, s.heads, s.kv_heads, s.head_dim, s.v_head_dim, docs.num_documents,
                docs.max_document_length, sliding_window);
  execute(key, docs, scale,
          {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()}, {kO, out.raw_data()}, {kDO, dout.raw_data()},
           {kStats, stats.raw_data()}, {kDQ, dq.raw_data()}, {kDK, dk.raw_data()}, {kDV, dv.raw_data()}});
}

size_t causal_attention_workspace_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                       int64_t num_documents, int64_t max_document_length, int64_t sliding_window,
                                       int64_t v_head_dim) {
  if (tokens == 0) return 0;
  size_t bytes = 0;
  for (bool backward : {false, true}) {
    const GraphKey key = graph_key(backward, tokens, heads, kv_heads, head_dim, v_head_dim > 0 ? v_head_dim : head_dim,
                                   num_documents, max_document_length, sliding_window);
    bytes = std::max(bytes, ragged_bytes(key.batch) + cached_graph(key).workspace_bytes);
  }
  return bytes;
}

}  // namespace moetune::ops::cuda
