// The engine's cuDNN flash attention: one graph per shape and layout (attention_graph.h), its plan chosen by
// cuDNN's heuristics, built once and cached. Documents that each fill a row of the batch (unpacked rows, what
// most fine-tuning batches are) run in the plain rows layout; anything else in the ragged one.
// The frontend keeps its serialisation (and its own copy of nlohmann::json) behind this switch; the engine has
// its own json library and never serialises graphs.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "moetune/ops/cuda/attention.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/queued_copies.h"
#include "moetune/ops/cuda/attention_graph.h"
#include "moetune/ops/cuda/cudnn_handle.h"

namespace moetune::ops::cuda {
namespace {

namespace fe = cudnn_frontend;
using attention_graph::GraphKey;
using attention_graph::Uid;

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN refused the key (`error` says why)
  size_t workspace_bytes = 0;
  std::string error;
};

BuiltGraph build(const GraphKey& key) {
  try {
    auto graph = attention_graph::operation_graph(key);
    attention_graph::check(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                           "creating execution plans", key);
    attention_graph::check(graph->check_support(), "the support check", key);
    attention_graph::check(graph->build_plans(), "building the plans", key);
    int64_t workspace = 0;
    attention_graph::check(graph->get_workspace_size(workspace), "the workspace query", key);
    return {std::move(graph), size_t(std::max<int64_t>(workspace, 0)), {}};
  } catch (const Error& e) {
    return {nullptr, 0, e.what()};
  } catch (const std::exception& e) {  // the frontend throws for some failures (e.g. a library it cannot load)
    return {nullptr, 0, fmt::format("building the {} threw: {}", attention_graph::describe(key), e.what())};
  }
}

// Built graphs, never evicted (a run needs a handful), and the keys cuDNN refused, with why.
const BuiltGraph& cached_graph(const GraphKey& key) {
  static std::mutex mutex;
  static std::map<GraphKey, BuiltGraph> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(key)).first;
  return it->second;
}

// The graph for this batch: the rows layout when every document fills its row (num_documents * bound == tokens
// with none longer than the bound: each is exactly the bound) and cuDNN builds it (said once on stderr when it
// does not), otherwise the ragged one, which must build.
std::pair<GraphKey, const BuiltGraph*> choose_graph(bool backward, int64_t tokens, int64_t heads, int64_t kv_heads,
                                                    int64_t head_dim, int64_t v_head_dim, int64_t num_documents,
                                                    int64_t max_document_length, int64_t window,
                                                    int64_t v_head_stride = 0) {
  if (num_documents > 0 && num_documents * max_document_length == tokens) {
    const GraphKey rows = attention_graph::rows_key(backward, heads, kv_heads, head_dim, v_head_dim, num_documents,
                                                    max_document_length, window, v_head_stride);
    const BuiltGraph& built = cached_graph(rows);
    if (built.graph) return {rows, &built};
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "moetune: flash attention falls back to the ragged layout: %s\n", built.error.c_str());
    });
  }
  const GraphKey key = attention_graph::ragged_key(backward, tokens, heads, kv_heads, head_dim, v_head_dim,
                                                   num_documents, max_document_length, window, v_head_stride);
  const BuiltGraph& built = cached_graph(key);
  if (!built.graph) fail("cuDNN flash attention: {}", built.error);
  return {key, &built};
}

// ---- argument checks ----

struct Shapes {
  int64_t tokens, heads, kv_heads, head_dim, v_head_dim, v_head_stride;
  void* v_data;  // v's first column (HeadColumns::first) in its heads
};

void check_tensor(const Tensor& t, std::string_view name, const Shape& shape, DType dtype) {
  MOETUNE_CHECK(t.defined(), "flash attention: {} is undefined", name);
  MOETUNE_CHECK(t.device().is_cuda(), "flash attention: {} is {}, not on the GPU", name, t.str());
  MOETUNE_CHECK(t.dtype() == dtype && t.shape() == shape, "flash attention: {} is {}, expected {}{}", name, t.str(),
                dtype_name(dtype), shape_str(shape));
  MOETUNE_CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0,
                "flash attention: {} ({}) does not start on a 16-byte boundary, which cuDNN needs", name, t.str());
}

// v's columns within its heads: checked, and its address (the block's first column).
void* head_columns_data(const HeadColumns& v, std::string_view name, int64_t tokens, int64_t kv_heads,
                        int64_t v_head_dim) {
  const Tensor& t = v.heads;
  check_tensor(t, name, {tokens, kv_heads, t.size(2)}, DType::BF16);
  MOETUNE_CHECK(v.first >= 0 && v.first % 8 == 0 && t.size(2) % 8 == 0 && v.first + v_head_dim <= t.size(2),
                "flash attention: {}'s columns [{}, {}) of {} must lie in its heads and start, like the heads, on a "
                "multiple of 8 (cuDNN's 16-byte alignment)", name, v.first, v.first + v_head_dim, t.str());
  return static_cast<char*>(t.raw_data()) + v.first * int64_t(sizeof(uint16_t));
}

Shapes check_inputs(const Tensor& q, const Tensor& k, const HeadColumns& v, const PackedDocuments& docs) {
  MOETUNE_CHECK(q.defined() && q.dim() == 3, "flash attention: q must be [T, heads, head_dim], got {}",
                q.defined() ? q.str() : "undefined");
  MOETUNE_CHECK(k.defined() && k.dim() == 3, "flash attention: k must be [T, kv_heads, head_dim], got {}",
                k.defined() ? k.str() : "undefined");
  const Tensor& vh = v.heads;
  MOETUNE_CHECK(vh.defined() && vh.dim() == 3, "flash attention: v must be [T, kv_heads, v_head_dim], got {}",
                vh.defined() ? vh.str() : "undefined");
  const int64_t v_head_dim = v.count >= 0 ? v.count : vh.size(2);
  Shapes s{q.size(0), q.size(1), k.size(1), q.size(2), v_head_dim, vh.size(2), nullptr};
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
  s.v_data = head_columns_data(v, "v", s.tokens, s.kv_heads, s.v_head_dim);
  MOETUNE_CHECK(docs.tokens == s.tokens, "flash attention: the documents cover {} tokens but q has {} ({})",
                docs.tokens, s.tokens, q.str());
  check_tensor(docs.cu_seqlens, "cu_seqlens", {docs.num_documents + 1}, DType::I32);
  MOETUNE_CHECK(s.tokens == 0 || (docs.num_documents > 0 && docs.max_document_length > 0),
                "flash attention: {} tokens in {} documents of at most {} tokens", s.tokens, docs.num_documents,
                docs.max_document_length);
  return s;
}

// Fills the lengths and offsets, then queues the graph on gpu::stream(). `pack` holds the activations.
void execute(const GraphKey& key, const BuiltGraph& built, const PackedDocuments& docs, double scale,
             attention_graph::VariantPack pack) {
  const size_t inputs_bytes = attention_graph::inputs_bytes(key);
  // Freed (stream-ordered) when this returns, after the work that uses it has been queued.
  Tensor scratch = Tensor::empty({int64_t(inputs_bytes + built.workspace_bytes)}, DType::U8, Device::cuda());
  char* base = static_cast<char*>(scratch.raw_data());
  float scale_value = float(scale);  // read by the host when the plan is queued
  attention_graph::add_call_inputs(key, docs, scale_value, base, pack);
  attention_graph::check(built.graph->execute(cudnn_handle(), pack, base + inputs_bytes), "execution", key);
  gpu::check(cudaGetLastError(), fmt::format("flash attention {}", attention_graph::describe(key)));
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
  // Queued without waiting: a training step uploads its batch while the GPU may still run the one before.
  docs.cu_seqlens = gpu::queue_upload(Tensor::from_vector(cu_seqlens, {int64_t(cu_seqlens.size())}));
  return docs;
}

Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const HeadColumns& v, const PackedDocuments& docs,
                               double scale, const Tensor& out, int64_t sliding_window) {
  const Shapes s = check_inputs(q, k, v, docs);
  check_tensor(out, "out", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  Tensor stats = Tensor::empty({s.tokens, s.heads}, DType::F32, Device::cuda());
  if (s.tokens == 0) return stats;
  const auto [key, built] = choose_graph(false, s.tokens, s.heads, s.kv_heads, s.head_dim, s.v_head_dim,
                                         docs.num_documents, docs.max_document_length, sliding_window, s.v_head_stride);
  using namespace attention_graph;
  execute(key, *built, docs, scale,
          {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, s.v_data},
           {kO, out.raw_data()}, {kStats, stats.raw_data()}});
  return stats;
}

void causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const HeadColumns& v,
                              const Tensor& out, const Tensor& stats, const PackedDocuments& docs, double scale,
                              const Tensor& dq, const Tensor& dk, const HeadColumns& dv, int64_t sliding_window) {
  const Shapes s = check_inputs(q, k, v, docs);
  check_tensor(dout, "dout", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  check_tensor(out, "out", {s.tokens, s.heads, s.v_head_dim}, DType::BF16);
  check_tensor(stats, "stats", {s.tokens, s.heads}, DType::F32);
  check_tensor(dq, "dq", q.shape(), DType::BF16);
  check_tensor(dk, "dk", k.shape(), DType::BF16);
  // dv is laid out as v is: the same head width, the same columns.
  MOETUNE_CHECK(dv.heads.defined() && dv.heads.shape() == v.heads.shape() && dv.first == v.first &&
                    (dv.count >= 0 ? dv.count : dv.heads.size(2)) == s.v_head_dim,
                "flash attention: dv ({}, columns from {}) must be laid out as v ({}, columns from {})",
                dv.heads.defined() ? dv.heads.str() : "undefined", dv.first, v.heads.str(), v.first);
  void* const dv_data = head_columns_data(dv, "dv", s.tokens, s.kv_heads, s.v_head_dim);
  if (s.tokens == 0) return;
  const auto [key, built] = choose_graph(true, s.tokens, s.heads, s.kv_heads, s.head_dim, s.v_head_dim,
                                         docs.num_documents, docs.max_document_length, sliding_window, s.v_head_stride);
  using namespace attention_graph;
  execute(key, *built, docs, scale,
          {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, s.v_data},
           {kO, out.raw_data()}, {kDO, dout.raw_data()}, {kStats, stats.raw_data()}, {kDQ, dq.raw_data()},
           {kDK, dk.raw_data()}, {kDV, dv_data}});
}

size_t causal_attention_workspace_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                       int64_t num_documents, int64_t max_document_length, int64_t sliding_window,
                                       int64_t v_head_dim) {
  if (tokens == 0) return 0;
  size_t bytes = 0;
  for (bool backward : {false, true}) {
    const auto [key, built] = choose_graph(backward, tokens, heads, kv_heads, head_dim,
                                           v_head_dim > 0 ? v_head_dim : head_dim, num_documents,
                                           max_document_length, sliding_window);
    bytes = std::max(bytes, attention_graph::inputs_bytes(key) + built->workspace_bytes);
  }
  return bytes;
}

}  // namespace moetune::ops::cuda
