// The cuDNN SDPA graphs behind ops/cuda/attention.h: what a graph depends on (GraphKey), building its operation
// graph, and the per-call inputs besides the activations (lengths, ragged offsets, the scale). Shared by
// attention.cpp (the engine's path: cuDNN's heuristic choice, cached) and attention_plans.cpp (a timing study
// that builds every plan cuDNN offers for a layout). The frontend's types stay out of this header (declared
// only), so that tests can include it without cudnn-frontend's include path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "moetune/ops/cuda/attention.h"

namespace cudnn_frontend::graph {
class Graph;
}

namespace moetune::ops::cuda::attention_graph {

// How cuDNN is told where a batch entry's tokens are. The engine's tensors are token-major [T, heads, width].
enum class Layout : uint8_t {
  kRagged,     // packed documents (THD): entry b is document b, found through ragged offsets, masked to its length
  kRows,       // BSHD: entry b is row b of [batch * max_length, heads, width] (every document fills its row)
  kHeadMajor,  // BHSD: [batch, heads, max_length, width]; the timing study's only (the engine has no such tensors)
};

const char* layout_name(Layout layout);

// What a built graph depends on. T itself does not enter a ragged forward graph (documents are found through
// the offsets); the ragged backward graph sizes its fp32 accumulators by the token count, rounded so that small
// changes reuse the graph.
struct GraphKey {
  bool backward = false;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t v_head_dim = 0;  // v's and the output's (MLA's differs from q/k's)
  int64_t v_head_stride = 0;  // elements from one head of v (dv) to the next: v_head_dim when packed
  int64_t batch = 0;       // kRagged: documents rounded up to a power of two (the extra ones empty); else rows
  int64_t max_length = 0;  // the bound on a document's length (kRows, kHeadMajor: the row length)
  int64_t max_tokens = 0;  // kRagged backward with max_total_seq_len: T rounded up to a multiple of 128
  int64_t window = 0;      // sliding window (0: none)
  Layout layout = Layout::kRagged;
  bool padding_mask = true;       // per-entry lengths read from the documents (kRagged needs it)
  bool max_total_seq_len = true;  // kRagged backward: cuDNN's fp32 accumulators sized by the tokens present
  bool deterministic = false;     // backward: cuDNN's deterministic algorithm
  auto operator<=>(const GraphKey&) const = default;
};

// The engine's key for packed documents (the ragged layout, padding mask, max_total_seq_len).
// v_head_stride 0: v packed (v_head_dim).
GraphKey ragged_key(bool backward, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                    int64_t v_head_dim, int64_t documents, int64_t max_document_length, int64_t window,
                    int64_t v_head_stride = 0);

// The key for `rows` rows of `length` tokens, each one document filling its row: no offsets, no padding mask.
GraphKey rows_key(bool backward, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, int64_t rows,
                  int64_t length, int64_t window, int64_t v_head_stride = 0);

std::string describe(const GraphKey& key);

// The graph for `key`, validated and lowered to cuDNN's operation graph, with no execution plans yet. Throws
// Error naming the key when cuDNN refuses it.
std::shared_ptr<cudnn_frontend::graph::Graph> operation_graph(const GraphKey& key);

// Ids of the graphs' tensors in the variant packs; the forward and backward graphs share them.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kScale, kSeqLenQ, kSeqLenKv, kQOffsets, kKOffsets, kVOffsets, kOOffsets, kStatsOffsets,
};

using VariantPack = std::unordered_map<int64_t, void*>;

// Bytes of per-call scratch before cuDNN's workspace: the lengths and ragged offsets (none for kRows and
// kHeadMajor without a padding mask). A multiple of 256.
size_t inputs_bytes(const GraphKey& key);

// Queues on gpu::stream() what fills the lengths and offsets at `scratch` (inputs_bytes(key) of them) from the
// documents, and adds those and the scale to `pack`; `scale_value` must live until the plan is queued.
void add_call_inputs(const GraphKey& key, const PackedDocuments& docs, float& scale_value, void* scratch,
                     VariantPack& pack);

[[noreturn]] void fail_step(std::string_view step, const GraphKey& key, const std::string& message);

// Fails with an Error naming the step, the key and cuDNN's message when the frontend's `status` is bad.
template <class Status>
void check(Status status, std::string_view step, const GraphKey& key) {
  if (status.is_bad()) fail_step(step, key, status.get_message());
}

}  // namespace moetune::ops::cuda::attention_graph
