// The clipping norm's pass over the gradients, moved into the backward pass (one GPU, clipping on): on a step's
// last micro-batch, as the decoder walk reports a layer's gradients final (model/decoder_walk.h's
// LayerGradientsDone), their partial sums of squares are queued on a stream of their own, so that this
// memory-bound read (5 GB of gradients on the Moonlight cut, 1.2 ms) runs beside the compute-bound backward
// GEMMs of the layers below instead of after them. The optimizer then sums the partials the backward pass left
// (the embedding's, done last) and adds them all up: the same slots and the same final order as
// ops::cuda::grad_norm_squared over the same list, so the same bits.
//
// Ordering: each launch on the norm stream waits for an event recorded on the compute stream when the layer
// is done, so it reads final gradients; the compute stream waits for the norm stream before the sum (finish)
// and before the next backward pass writes gradients again (begin_micro_batch), so zero_grad, which runs after
// the optimizer, never overwrites gradients the norm stream still reads. Nothing is allocated on the norm
// stream: the partials are a buffer of this object's, allocated once on the compute stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/grad_norm.h"

namespace moetune::train::cuda {

class OverlappedGradNorm {
 public:
  // `gradients`: the list the optimizer clips (the engine's order), and their parameters' names (parallel), which
  // say when in the backward pass each is final (model/gradient_ready_layer.h).
  OverlappedGradNorm(const std::vector<Tensor>& gradients, const std::vector<std::string>& names, int64_t num_layers);
  ~OverlappedGradNorm();
  OverlappedGradNorm(const OverlappedGradNorm&) = delete;
  OverlappedGradNorm& operator=(const OverlappedGradNorm&) = delete;

  // gradients[index] (and the others its layer finishes) is read by finish only, not in the backward pass: the
  // lazily updated embedding's, which finish reads in its marked rows alone.
  void read_at_finish(size_t index);
  // Before each micro-batch's backward pass: only the step's last one starts partials (earlier ones' gradients
  // are not final). Forgets the partials of any earlier micro-batch.
  void begin_micro_batch(bool last_of_step);
  // The walk's hook: num_layers (final norm, untied LM head), each layer L, then -1 (the embedding).
  void layer_done(int64_t layer);
  // Σ g² over every gradient into norm_squared (CUDA F32 [1]), queued on the compute stream: the partials not
  // started yet (all of them, unless the last micro-batch's backward pass started some), then the sum. sparse
  // (or null; its index into the constructor's list): a gradient read in its marked rows only (the same bits).
  void finish(const Tensor& norm_squared, const ops::cuda::MarkedRows* sparse = nullptr);

 private:
  struct Group {
    int64_t layer;
    std::vector<Tensor> gradients;
    std::vector<int64_t> first_slots;
    std::vector<size_t> indices;  // in the constructor's list
    bool at_finish = false;       // read_at_finish
    bool started = false;  // in the current micro-batch's backward pass
  };
  void start(Group& group);
  void join();  // the compute stream waits for what the norm stream has queued

  std::vector<Group> groups_;  // by ready layer, highest (done first) first
  Tensor partials_;            // F32 [every gradient's slots]
  bool armed_ = false;         // the step's last micro-batch
  bool pending_ = false;       // norm-stream work the compute stream has not waited for
  cudaStream_t stream_ = nullptr;
  cudaEvent_t layer_done_ = nullptr, partials_done_ = nullptr;
};

}  // namespace moetune::train::cuda
