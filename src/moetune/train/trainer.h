// The fine-tuning loop: micro-batches -> forward/backward (gradients accumulated over the step's micro-batches,
// the loss normalised by the step's scored tokens as transformers' Trainer does) -> clipping -> AdamW at the
// scheduled rate. It logs every step (progress line, metrics.jsonl, TensorBoard, MoE router telemetry), validates,
// and checkpoints: an HF folder plus the exact training state, written under a temporary name and then renamed,
// the last `keep_last` kept. SIGINT/SIGTERM finish the current step, checkpoint and return.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>

#include "moetune/data/loader.h"
#include "moetune/model/causal_lm.h"
#include "moetune/train/engine.h"
#include "moetune/train/lr_schedule.h"
#include "moetune/train/metrics_log.h"
#include "moetune/train/recipe.h"

namespace moetune::train {

struct TrainResult {
  int64_t steps = 0;
  bool interrupted = false;
  double last_loss = NAN;
  double validation_loss = NAN;
  std::filesystem::path final_model;  // the HF folder of the last checkpoint
};

class Trainer {
 public:
  // `resume`: continue from the newest checkpoint in the recipe's output folder.
  Trainer(Recipe recipe, data::TextCodec codec, bool resume);
  ~Trainer();

  TrainResult run();
  TrainingEngine& engine() { return *engine_; }
  // Stops after this many steps as if interrupted (tests use it to check resumption).
  void stop_after(int64_t step) { stop_after_ = step; }

  // Set by the SIGINT/SIGTERM handler that install_stop_handlers() installs; the loop checks it between steps.
  static std::atomic<bool> stop_requested;
  static void install_stop_handlers();

 private:
  struct StepStats;
  StepStats train_step();
  double validate();
  void save_checkpoint(bool final);
  void restore_checkpoint(const std::filesystem::path& checkpoint);
  void log_progress(const StepStats& stats, double seconds);

  Recipe recipe_;
  std::filesystem::path output_;
  std::unique_ptr<TrainingEngine> engine_;
  LrSchedule schedule_;
  std::unique_ptr<data::DataLoader> train_data_, validation_data_;
  std::unique_ptr<MetricsLog> metrics_;
  int64_t step_ = 0, total_steps_ = 0;
  std::optional<int64_t> stop_after_;
  std::filesystem::path last_checkpoint_;
};

// Finds checkpoint-NNNNNN folders in `output`, newest last.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output);

}  // namespace moetune::train
