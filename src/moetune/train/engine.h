// What the trainer drives: a model, its gradients and its optimizer on one device. The CPU engine is the fp32
// reference (model::CausalLM + train::AdamW); the GPU engine runs the bf16 step with the fused kernels
// (model::cuda::CausalLM + ops::cuda::adamw_step). The trainer's loop, data, logging and checkpoints are the
// same for both.
#pragma once

#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moetune/io/safetensors.h"
#include "moetune/model/causal_lm.h"
#include "moetune/parallel/parallel_layout.h"
#include "moetune/train/recipe.h"

namespace moetune::train {

// What the host reads back of one training step (TrainingEngine::finish_step).
struct StepReadings {
  std::vector<model::CausalLMOutput> micro_batches;          // each micro-batch's losses, in order (no logits)
  std::vector<std::pair<int64_t, ops::RouterStats>> router;  // the last micro-batch's, per MoE layer
  double grad_norm = NAN;                                    // before clipping
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;
  virtual const model::ModelSpec& spec() const = 0;
  virtual Device device() const = 0;
  // The next `micro_batches` calls of forward_backward make up one optimizer step at learning rate `lr` (so the
  // last may start reducing gradients between ranks while its backward pass runs, or update the parameters
  // there: optimizer.update_in_backward). Without it, reductions wait for the step.
  virtual void begin_step(int64_t micro_batches, double lr) { (void)micro_batches, (void)lr; }
  // Forward and backward of one micro-batch; gradients accumulate until optimizer_step().
  virtual model::CausalLMOutput forward_backward(const model::Batch& batch) = 0;
  // The loss without gradients (labels required).
  virtual model::CausalLMOutput evaluate(const model::Batch& batch) = 0;
  // Router telemetry of the last forward_backward, per MoE layer.
  virtual std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const = 0;
  // Clips to max_grad_norm (when > 0), takes one AdamW step at `lr` (unless the backward pass took it already)
  // and zeroes the gradients. Returns the gradient norm before clipping. The CPU engine takes no step when that norm is NaN or infinite.
  virtual double optimizer_step(double lr, double max_grad_norm) = 0;
  // The trainer's way through a step, which lets an engine put off the host's reads of the step's numbers so
  // that the host queues the next step while the GPU still runs this one: begin_step, queue_forward_backward
  // per micro-batch, queue_optimizer_step; finish_step() returns the oldest queued step's numbers (waiting for
  // them), and may come after the next step is queued. The defaults do each call's work at once with
  // forward_backward, router_stats and optimizer_step.
  virtual void queue_forward_backward(const model::Batch& batch);
  virtual void queue_optimizer_step(double lr, double max_grad_norm);
  virtual StepReadings finish_step();
  virtual int64_t optimizer_steps() const = 0;
  virtual void save_pretrained(const std::filesystem::path& folder) const = 0;
  // The exact training state as host tensors ("param.NAME", "adam_m.NAME", "adam_v.NAME", and "master.NAME"
  // for fp32 master weights), and its restore.
  virtual io::NamedTensors training_state() const = 0;
  virtual void restore_training_state(const io::SafetensorsFile& file, int64_t optimizer_steps) = 0;
  // After every rank restored its state without error (restore is not collective, so a rank that fails cannot
  // leave the others waiting): the collective part, e.g. gathering the ZeRO shards of the parameters.
  virtual void finish_restore() {}
  // Extra fields for the step's metrics record (GPU memory), as JSON. Collective under several ranks (the
  // spread of the ranks' peaks): every rank calls it.
  virtual nlohmann::json memory_metrics() const { return nlohmann::json::object(); }

 private:
  std::deque<StepReadings> readings_;  // the defaults' queued steps; the last one open until its optimizer step
  bool last_open_ = false;
};

// The engine the recipe asks for: training.device cpu | cuda | auto (cuda when a GPU is visible). `groups`:
// this rank's place in a job of several ranks (null: alone). Under several ranks, save_pretrained and
// optimizer_step are collective (every rank calls them), and training_state() is this rank's share.
std::unique_ptr<TrainingEngine> make_engine(const Recipe& recipe,
                                            std::shared_ptr<const parallel::ParallelGroups> groups = nullptr);
std::unique_ptr<TrainingEngine> make_cpu_engine(const Recipe& recipe,
                                                std::shared_ptr<const parallel::ParallelGroups> groups = nullptr);
bool uses_gpu_engine(const Recipe& recipe);
// Fails with the reason when there is no GPU or moetune was built without CUDA.
std::unique_ptr<TrainingEngine> make_gpu_engine(const Recipe& recipe,
                                                std::shared_ptr<const parallel::ParallelGroups> groups = nullptr);
// The recipe's LoRA settings (from lora.adapter's adapter_config.json when it names one); nullopt without LoRA.
std::optional<model::LoraConfig> lora_settings(const Recipe& recipe);
// What a rank loads: its share of the experts, its flat runs split as ZeRO shards them.
model::LoadOptions load_options(const parallel::ParallelLayout& layout, DType dtype, Device device);
// What an engine trains: the recipe's model loaded with load_options, training.freeze's parameters frozen and
// training.aux_loss_coef (when a number) as the aux loss's weight.
// `adjust` may change the load options first (the GPU engine's QLoRA takes its NF4 base there).
model::ModelWeights load_for_training(const Recipe& recipe, const parallel::ParallelLayout& layout, DType dtype, Device device,
                                      const std::function<void(model::LoadOptions&)>& adjust = {});

}  // namespace moetune::train
