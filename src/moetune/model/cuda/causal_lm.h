// The causal LM on one GPU: bf16 parameters, gradients and activations, fp32 where DESIGN.md says (norm
// statistics, softmax, router probabilities, loss). Same blocks, same order and same stash discipline as the CPU
// reference (model/causal_lm.h), which is what the GPU tests compare it with. The LM head and the loss are one
// fused, chunked op, so a training forward pass also computes the head's gradients; `forward_backward` is the
// training entry point, `logits` and `loss` the evaluation ones.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "moetune/model/causal_lm.h"
#include "moetune/model/cuda/attention_block.h"
#include "moetune/model/cuda/device_batch.h"
#include "moetune/model/cuda/gated_delta_block.h"
#include "moetune/model/cuda/mamba2_block.h"
#include "moetune/model/cuda/mlp_block.h"
#include "moetune/model/cuda/moe_block.h"
#include "moetune/model/decoder_walk.h"
#include "moetune/model/recompute.h"

namespace moetune::model::cuda {

// The GPU's blocks for the decoder walk (model/decoder_walk.h).
struct GpuBlocks {
  using Attention = AttentionBlock;
  using Mlp = DenseMlpBlock;
  using Moe = MoeBlock;
  using Mamba2 = Mamba2Block;
  using GatedDelta = GatedDeltaBlock;
  using Dispatcher = LocalDispatcher;
  using DispatcherBase = TokenDispatcher;
};

class CausalLM final : public LanguageModel {
 public:
  static CausalLM from_pretrained(const std::filesystem::path& folder);
  // From weights already on the GPU in bf16; expert parallelism loads its share of the experts and passes its
  // all-to-all dispatcher.
  // `gradients`: LayerArena for the update during the backward pass (train/cuda/update_in_backward.h).
  static CausalLM from_weights(ModelWeights weights, const DispatcherFactory<GpuBlocks>& make_dispatcher = {},
                               GradientStorage gradients = GradientStorage::Flat) {
    return CausalLM(std::move(weights), make_dispatcher, gradients);
  }

  // One micro-batch: forward, loss, backward (gradients accumulate into the parameters' .grad). Waits for the
  // GPU once, at the end, to read the loss.
  CausalLMOutput forward_backward(const Batch& batch) override;
  // forward_backward without the wait: the losses stay on the GPU until read() (after what else the caller
  // queued). Its loss tensors are the pass's own; nothing later overwrites them.
  struct QueuedLosses {
    Tensor loss_sum;        // F32 [1]: Σ over scored tokens of the cross-entropy
    double lm_scale = 0;    // lm_loss = loss_sum · lm_scale
    Tensor aux_loss;        // F32 [1], undefined without the aux loss
    double aux_scale = 0;   // loss = lm_loss + aux_scale · aux_loss
    int64_t num_tokens = 0;
    // The output from the tensors' values as read back (`aux` ignored without an aux loss).
    CausalLMOutput read(float loss_sum_value, float aux_value) const;
  };
  QueuedLosses queue_forward_backward(const Batch& batch);
  // Told, in forward_backward's backward pass, when gradients are final (queued on the GPU, not yet computed):
  // num_layers() first (the LM head and the final norm), then each layer L (every parameter of layers >= L),
  // then -1 (all of them, the embedding too). Expert and data parallelism start reductions there.
  void on_gradients_done(LayerGradientsDone hook) { gradients_done_ = std::move(hook); }
  // Told, in every forward pass, before parameters are used: -1 (the embedding), then each layer L, then
  // num_layers() (the final norm and the LM head). ZeRO's all-gather of the parameters overlaps the forward pass.
  void on_parameters_needed(LayerStarting hook) { parameters_needed_ = std::move(hook); }
  // Told, in every forward pass (training, evaluation, generation), just before the embedding table is read, with
  // the batch's ids (CUDA I32 [T]): a table updated lazily brings those rows up to date there
  // (ops/cuda/adamw_rows.h).
  void on_embedding_lookup(std::function<void(const Tensor& ids)> hook) { embedding_lookup_ = std::move(hook); }
  // A gradient that zero_grad() leaves alone, because the optimizer zeroes the rows it wrote (the lazily updated
  // embedding's: ops/cuda/adamw_rows.h). Must lie in one of the replicated gradient runs.
  void keep_gradient_in_zero_grad(const Tensor& grad) { kept_gradient_ = grad; }
  // Told, in forward_backward's backward pass, before layer L's backward (and recomputation) runs: QLoRA
  // dequantizes the layer's frozen base there again (model/cuda/nf4_base.h).
  void on_layer_backward(LayerStarting hook) { layer_backward_ = std::move(hook); }
  // training.lm_head_chunk_rows: the fused LM head + loss's chunk height (ops/cuda/linear_cross_entropy.h), in
  // training and evaluation; 0 (the default) picks ops/lm_head_chunk.h's, which the memory plan assumes unless
  // told the same number.
  void set_lm_head_chunk_rows(int64_t rows) { lm_head_chunk_rows_ = rows; }
  // On (the default): an untied, trainable LM head's gradient is written whole by a step's first backward pass
  // (StepContext::overwrite_gradients: its first chunk's d(W) with beta 0) and zero_grad() leaves it alone. Off:
  // zero_grad() zeroes it and every pass adds, the path before; the tests compare the two, bit for bit.
  void set_head_gradient_written(bool on);
  // Or null: the MoE blocks' expert weight gradients sum their squares for the clipping norm there
  // (model/cuda/expert_norm_partials.h) when their backward pass writes them whole. The engine owns it.
  void set_expert_norm_partials(ExpertNormPartials* partials) { expert_norms_ = partials; }
  // training.recompute: which sublayers keep only their input for the backward pass (model/recompute.h); the
  // last `keep_last_layers` layers keep their stash anyway (training.recompute_keep_layers).
  void set_recompute(Recompute mode, int64_t keep_last_layers = 0);
  // Loss without gradients (labels required): lm_loss, aux_loss, num_tokens.
  CausalLMOutput loss(const Batch& batch) override;
  // Full logits [B, S, V] as f32 on the host, for evaluation and tests.
  Tensor logits(const Batch& batch) override;
  // Each MoE sublayer's choices for this batch (host, token t's k experts at [t·k, t·k + k)), in walk order; a
  // forward pass without gradients, like logits(). Tests compare them with the CPU engine's.
  std::vector<std::vector<int32_t>> routing_choices(const Batch& batch);
  // Generation (language_model.h): the cache is a model/cuda/kv_cache.h KvCache; the LM head runs on the last
  // row only.
  std::unique_ptr<DecodeCache> new_decode_cache(int64_t max_tokens) override;
  Tensor next_token_logits(const std::vector<int64_t>& ids, DecodeCache& cache) override;

  Device device() const override { return Device::cuda(); }
  // Leaves alone an expert-gradient run whose every gradient a MoE block overwrites on the step's first backward
  // pass (StepContext::overwrite_gradients): zeroing them would only cost bandwidth (4.8 GB per step on the
  // 4-layer Qwen3-30B-A3B cut). The runs' alignment gaps and padding are never written, so they stay zero. In
  // the replicated runs it leaves alone the untied head's gradient, which that pass writes too (671 MB on
  // Moonlight), and the kept gradient (keep_gradient_in_zero_grad).
  void zero_grad() override;
  // The gradients the blocks write whole on a step's first backward pass, which zero_grad() leaves alone (the
  // head's apart: set_head_gradient_written).
  const std::vector<Tensor>& overwritten_gradients() const { return overwritten_gradients_; }
  void set_lora_draw(uint64_t draw) override { lora_draw_ = draw; }
  void save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options = {}) const override;
  ParameterStore& parameters() override { return *store_; }
  const ModelWeights& weights() const override { return store_->weights(); }
  const ModelSpec& spec() const override { return store_->weights().spec(); }
  // What each sublayer's block held for the backward pass at the end of the last forward_backward's forward pass
  // ("layers.0.attention", "layers.0.moe", ...), in walk order: the memory plan's per-block figures are checked
  // against it.
  std::vector<std::pair<std::string, size_t>> stash_report() const override { return stash_report_; }
  // Per MoE layer: load statistics of the last forward pass (reads the counts back: call between steps).
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override;
  // The same without reading back: each MoE layer's counts tensor (F32 [experts]; the next
  // forward pass makes new ones), for router_stats_of_counts once read.
  std::vector<std::pair<int64_t, Tensor>> router_counts() const;
  // DeepSeek-V3's aux-loss-free balancing (model/router_bias_balance.h), as the CPU model does it: each MoE
  // layer's top-k counts of the last forward pass added to `load` (host, per MoE layer in walk order; reads the
  // counts back), then each fp32 correction bias moved by `rate` toward balance. Fails naming the key when a
  // MoE layer has no correction bias (check_router_correction_biases alone checks that).
  void add_expert_load(std::vector<std::vector<double>>& load) const;
  void update_router_bias(double rate, const std::vector<std::vector<double>>& load);
  void check_router_correction_biases() const;

 private:
  struct Forward {
    Tensor final_hidden;   // before the final norm
    Tensor normed;         // after it
  };

  CausalLM(ModelWeights weights, const DispatcherFactory<GpuBlocks>& make_dispatcher, GradientStorage gradients);
  // Starts the context's aux-loss sums when `with_aux`.
  Forward run_layers(StepContext& context, bool with_aux);
  void clear_stashes();  // evaluation keeps nothing for a backward pass
  bool wants_aux(const Batch& batch) const;
  // Granite's logits_scaling: the LM head's output times logit_scale() = 1 / ModelSpec::logits_divisor (in place,
  // BF16).
  float logit_scale() const { return float(1.0 / spec().logits_divisor); }
  void divide_logits(const Tensor& logits) const;

  std::unique_ptr<ParameterStore> store_;
  std::vector<Sublayer<GpuBlocks>> sublayers_;
  std::vector<std::pair<std::string, size_t>> stash_report_;
  Param head_, final_norm_, embed_;
  // ModelSpec::embedding_scale, rounded to bf16 where transformers rounds it to the weight's dtype (Gemma's
  // embed_scale).
  float embedding_scale_ = 1.0f;
  LayerGradientsDone gradients_done_;
  LayerStarting parameters_needed_;
  LayerStarting layer_backward_;
  std::function<void(const Tensor& ids)> embedding_lookup_;
  Tensor kept_gradient_;  // keep_gradient_in_zero_grad
  uint64_t lora_draw_ = 0;  // LoRA dropout's draw for the next training forward
  // What the blocks write whole on a step's first backward pass (StepContext::overwrite_gradients), which
  // zero_grad() therefore leaves alone.
  std::vector<Tensor> overwritten_gradients_;
  // The LM head's gradient when the step's first backward pass writes it whole (set_head_gradient_written):
  // untied and trainable. Undefined otherwise: a tied head's gradient is the embedding's, which the embedding's
  // backward pass adds to as well.
  Tensor written_head_gradient_;
  int64_t lm_head_chunk_rows_ = 0;  // set_lm_head_chunk_rows
  bool keep_outputs_ = false;       // StepContext::keep_outputs of training passes; set_recompute sets it
  ExpertNormPartials* expert_norms_ = nullptr;  // set_expert_norm_partials
  // No backward pass since the gradients were made or zero_grad(): the next forward_backward is a step's first
  // micro-batch. Only zero_grad() sets it.
  bool next_backward_overwrites_ = true;
};

// A MoE layer's load statistics from its top-k counts per expert (host, `experts` of them).
ops::RouterStats router_stats_of_counts(const float* counts, int64_t experts);

}  // namespace moetune::model::cuda
