// A batch as the GPU blocks read it: ids, positions, shifted targets and the padding flags uploaded once per
// micro-batch, and the documents that attention keeps apart. Built on the host from the same SequenceLayout
// the CPU reference uses, so both paths agree on positions, documents and what counts.
#pragma once

#include <optional>
#include <vector>

#include "moetune/model/causal_lm.h"
#include "moetune/model/cuda/mamba2_mixer_gpu.h"
#include "moetune/ops/cuda/attention.h"

namespace moetune::model::cuda {

struct DeviceBatch {
  int64_t rows = 0, seq = 0, tokens = 0;
  Tensor ids;             // I32 [T]
  Tensor positions;       // I32 [T]
  Tensor targets;         // I32 [T], labels shifted by one, -100 where not scored; undefined without labels
  Tensor token_valid;     // U8 [T], 0 for padding; undefined when there is none
  ops::cuda::PackedDocuments documents;
  int64_t scored = 0;     // targets that are not -100
  int64_t valid_tokens = 0;
  SequenceLayout layout;  // the host copy (the router statistics read token_valid)

  // Where the Mamba2 layers' conv window and scan restart, and the padding they zero: uploaded by the step's
  // first Mamba2 layer, shared by the others (a model without Mamba2 layers never uploads them).
  const Mamba2GpuRows& mamba2_rows() const {
    if (!mamba2_rows_) mamba2_rows_ = upload_mamba2_rows(model::mamba2_rows(layout));
    return *mamba2_rows_;
  }

 private:
  mutable std::optional<Mamba2GpuRows> mamba2_rows_;
};

// Padding cannot sit inside a document on the GPU (flash attention sees whole documents): each run of padding
// becomes a document of its own, which no real token can see. A real token after padding in the same row
// starts a new document too; that is exactly left padding. Padding between two parts of one document, which
// the CPU reference can express, is refused. Token ids outside the vocabulary, and positions the config's RoPE
// does not take (model/sequence_layout.h), are refused too.
DeviceBatch upload_batch(const ModelSpec& spec, const Batch& batch);

}  // namespace moetune::model::cuda
