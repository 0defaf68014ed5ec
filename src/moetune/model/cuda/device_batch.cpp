#include "moetune/model/cuda/device_batch.h"

#include "moetune/core/queued_copies.h"
#include "moetune/ops/loss.h"

namespace moetune::model::cuda {
namespace {

// Queued without waiting (core/queued_copies.h): the trainer uploads a step's batch while the GPU may still run
// the step before.
Tensor upload_i32(const std::vector<int64_t>& values) {
  std::vector<int32_t> narrow(values.begin(), values.end());
  return gpu::queue_upload(Tensor::from_vector(narrow, {int64_t(narrow.size())}));
}

// Document starts for flash attention: the layout's documents, split further at every change between padding
// and real tokens.
std::vector<int64_t> attention_documents(const SequenceLayout& layout) {
  const std::vector<int64_t>& document = layout.mask.document_start;
  const std::vector<uint8_t>& valid = layout.token_valid;
  std::vector<int64_t> start = document;
  if (valid.empty()) return start;
  bool real_then_padding = false;  // within the current document
  for (size_t t = 1; t < start.size(); ++t) {
    if (document[t] != document[t - 1]) {
      real_then_padding = false;
      continue;
    }
    if (valid[t] == valid[t - 1]) {
      start[t] = start[t - 1];
      continue;
    }
    if (valid[t] && real_then_padding)
      fail("the GPU path cannot attend across padding inside a document (token {}): put padding at the start or "
           "the end of a row", t);
    real_then_padding = real_then_padding || (!valid[t] && valid[t - 1]);
    start[t] = int64_t(t);
  }
  return start;
}

}  // namespace

DeviceBatch upload_batch(const ModelSpec& spec, const Batch& batch) {
  const int64_t vocab_size = spec.vocab_size;
  MOETUNE_CHECK(batch.input_ids.dim() == 2 && batch.input_ids.dtype() == DType::I64 && batch.input_ids.device().is_cpu(),
                "forward: input_ids must be I64 [B, S] on the host, got {}", batch.input_ids.str());
  DeviceBatch out;
  out.rows = batch.input_ids.size(0);
  out.seq = batch.input_ids.size(1);
  out.tokens = batch.input_ids.numel();
  out.layout = sequence_layout(batch.input_ids, batch.position_ids, batch.attention_mask);
  require_rope_positions(spec, out.layout);
  const int64_t* ids = batch.input_ids.data<int64_t>();
  for (int64_t t = 0; t < out.tokens; ++t)
    if (ids[t] < 0 || ids[t] >= vocab_size)
      fail("input_ids: token id {} at position {} is outside the vocabulary of {}", ids[t], t, vocab_size);
  out.ids = upload_i32(std::vector<int64_t>(ids, ids + out.tokens));
  out.positions = upload_i32(out.layout.positions);
  if (!out.layout.token_valid.empty()) {
    out.token_valid = gpu::queue_upload(Tensor::from_vector(out.layout.token_valid, {out.tokens}));
    for (uint8_t v : out.layout.token_valid) out.valid_tokens += v;
  } else {
    out.valid_tokens = out.tokens;
  }
  if (batch.labels.defined()) {
    MOETUNE_CHECK(batch.labels.shape() == batch.input_ids.shape(), "forward: labels {} for input_ids {}",
                  batch.labels.str(), batch.input_ids.str());
    const std::vector<int64_t> targets = ops::shift_labels(batch.labels);
    for (int64_t target : targets) {
      if (target == ops::kIgnoreIndex) continue;
      if (target < 0 || target >= vocab_size)
        fail("labels: {} is outside the vocabulary of {} (and is not -100)", target, vocab_size);
      ++out.scored;
    }
    out.targets = upload_i32(targets);
  }
  out.documents = ops::cuda::pack_documents(attention_documents(out.layout), out.seq);
  return out;
}

}  // namespace moetune::model::cuda
