// Causal grouped-query flash attention on the GPU, forward and backward, through cuDNN's fused SDPA graphs
// (cudnn-frontend). Semantics are those of ops/attention.h's causal_attention / causal_attention_backward:
// documents are laid end to end along the token dimension, each query attends to the keys of its own document
// up to itself, and query head h reads key/value head h / (heads / kv_heads). The CPU mask's key_valid has no
// counterpart here: padding is its own document (it sees only itself, and no real token sees it).
//
// Inputs are BF16 with fp32 accumulation; the softmax statistics are F32. When every document fills a row of
// max_document_length tokens (unpacked full rows) cuDNN reads the rows as a plain [rows, length, heads, width]
// batch (BSHD); otherwise it reads the packed tokens through its ragged (THD) layout: documents become batch
// entries of at most max_document_length tokens, with element offsets and lengths computed on the device from
// cu_seqlens. Graphs are built once per shape (heads, kv_heads, head_dim, max_document_length, the layout, the
// document count (ragged: rounded up to a power of two), the sliding window, and for the ragged backward pass the
// token count rounded up to 128) and cached for the life of the process, so a training run builds a few.
//
// sliding_window > 0 (GPT-OSS's sliding_attention layers): query t sees only keys t - window + 1 .. t of its
// document (transformers: kv_idx > q_idx - window), through cuDNN's diagonal band (left bound = window). 0: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// Documents laid end to end along the token dimension (packed sequences, or the rows of a batch): document i
// holds tokens [cu_seqlens[i], cu_seqlens[i+1]). Causal within each document, nothing across documents.
struct PackedDocuments {
  Tensor cu_seqlens;                // device I32 [num_documents + 1], cu_seqlens[0] = 0, last = tokens
  int64_t num_documents = 0;
  int64_t max_document_length = 0;  // a bound (e.g. the padded row length): lets graphs be reused
  int64_t tokens = 0;               // T, checked against the tensors on every call
};

// Built once per batch on the host from per-token document starts (the CPU mask's document_start vector:
// token t's document begins at document_start[t]). Fails when a document is longer than max_document_length
// or document_start does not describe consecutive documents.
PackedDocuments pack_documents(const std::vector<int64_t>& document_start, int64_t max_document_length);

// v (or dv) as columns [first, first + count) of each head of a wider [T, kv_heads, width] array, which cuDNN reads
// (writes) in place: MLA's kv_b output holds each head's k_nope and v side by side. A whole [T, kv_heads, dv]
// tensor converts to its own block. first and width multiples of 8 (cuDNN's 16-byte alignment).
struct HeadColumns {
  Tensor heads;                   // [T, kv_heads, width] BF16 on the GPU
  int64_t first = 0, count = -1;  // count -1: all `width` columns
  HeadColumns() = default;
  HeadColumns(Tensor whole) : heads(std::move(whole)) {}  // NOLINT: a whole tensor is its own block
  HeadColumns(Tensor t, int64_t first_column, int64_t columns)
      : heads(std::move(t)), first(first_column), count(columns) {}
};

// q and k [T, heads or kv_heads, d], v [T, kv_heads, dv], out [T, heads, dv], all BF16 on the GPU;
// heads % kv_heads == 0, d and dv multiples of 8, dv <= d <= 256 (dv < d: DeepSeek's latent attention).
// Writes out and returns the softmax statistics that the backward pass needs: the
// natural-log logsumexp of the scaled scores, F32 [T, heads].
Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const HeadColumns& v, const PackedDocuments& docs,
                               double scale, const Tensor& out, int64_t sliding_window = 0);

// dout and out [T, heads, dv] BF16 (out as the forward pass wrote it), stats from the forward pass. Overwrites
// dq [T, heads, d], dk [T, kv_heads, d] and dv [T, kv_heads, dv] (BF16; dv laid out as v is).
void causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const HeadColumns& v,
                              const Tensor& out, const Tensor& stats, const PackedDocuments& docs, double scale,
                              const Tensor& dq, const Tensor& dk, const HeadColumns& dv, int64_t sliding_window = 0);

// Bytes of scratch GPU memory one forward or backward call allocates (and frees when its work is done) for this
// shape: the larger of the two cuDNN workspaces plus the ragged offsets. Builds the graphs if they are not
// cached yet, so it needs a GPU. The returned statistics ([T, heads] F32) are not included.
size_t causal_attention_workspace_bytes(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                       int64_t num_documents, int64_t max_document_length, int64_t sliding_window = 0,
                                       int64_t v_head_dim = 0);  // 0: head_dim

}  // namespace moetune::ops::cuda
