// The fine-tuning loop: micro-batches -> forward/backward (gradients accumulated over the step's micro-batches,
// the loss normalised by the step's scored tokens as transformers' Trainer does) -> clipping -> AdamW at the
// scheduled rate. It logs every step (progress line, metrics.jsonl, TensorBoard, MoE router telemetry), validates,
// and checkpoints: an HF folder plus the exact training state, written under a temporary name and then renamed,
// the last `keep_last` kept. SIGINT/SIGTERM finish the current step (or cut validation short), checkpoint and
// return; during start-up they stop it before anything is written (StartupInterrupted).
//
// Before the first step every data line is read once: a bad line or a data set with no scored token is an
// error now, not at step 42. A run holds a lock on its output folder (output_lock.h). A step whose loss or
// gradient norm is not finite takes no update; more than training.max_nonfinite_steps of them in a row stop
// the run with an error and no checkpoint of the broken state.
//
// Several ranks (parallel/world.h): every rank reads the same micro-batches in the same order, and a step's
// rank r trains micro-batches [r·A, (r+1)·A) of the step's world·A, so N ranks with accumulation A compute
// the update of one rank with accumulation N·A (the loss normalised by the step's scored tokens over all
// ranks); the data position is the same on every rank, so resuming is exact. Rank 0 logs, holds the lock and
// finishes checkpoints; every rank writes its shards into them.
#pragma once

#include <atomic>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>

#include "moetune/data/loader.h"
#include "moetune/data/step_reader.h"
#include "moetune/model/causal_lm.h"
#include "moetune/parallel/parallel_layout.h"
#include "moetune/parallel/timed_communicator.h"
#include "moetune/parallel/watchdog.h"
#include "moetune/train/engine.h"
#include "moetune/train/lr_schedule.h"
#include "moetune/train/metrics_log.h"
#include "moetune/train/output_lock.h"
#include "moetune/train/recipe.h"
#include "moetune/train/step_profile.h"

namespace moetune::train {

struct TrainResult {
  int64_t steps = 0;
  bool interrupted = false;
  double last_loss = NAN;
  double validation_loss = NAN;
  // A finished run's model: output.dir/final-model, the last checkpoint without its training state; an
  // interrupted run's last checkpoint (save_final false: the last one saved before the end, if any).
  std::filesystem::path final_model;
};

// SIGINT/SIGTERM arrived before training started; nothing was written.
class StartupInterrupted : public Error {
 public:
  StartupInterrupted() : Error("interrupted during start-up; no checkpoint was written") {}
};

// The recipe names a model and training data (else an Error saying which key to set).
void require_model_and_data(const Recipe& recipe);

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
  // Queues the next step on the engine (its numbers read later); finish_step() reads the oldest queued one.
  void queue_step();
  StepStats finish_step();
  double validate();
  void save_checkpoint(bool final);
  void resume_from_newest_checkpoint();
  void restore_checkpoint(const std::filesystem::path& checkpoint);
  void log_progress(const StepStats& stats, double seconds);
  void check_finite(const StepStats& stats);

  bool is_main() const { return groups_->layout.rank == 0; }
  // The layout of this run's ranks as trainer_state.json records it.
  nlohmann::json layout_record() const;
  bool any_rank(bool flag) const;
  void progress(const char* next) {
    if (watchdog_) watchdog_->progress(next);
  }

  Recipe recipe_;
  std::filesystem::path output_;
  std::shared_ptr<parallel::CommunicationClock> communication_ = std::make_shared<parallel::CommunicationClock>();
  std::shared_ptr<const parallel::ParallelGroups> groups_;
  std::unique_ptr<parallel::Watchdog> watchdog_;  // several ranks only
  std::unique_ptr<OutputLock> lock_;  // rank 0's; nothing is read or written in the folder before it is ours
  std::unique_ptr<TrainingEngine> engine_;
  std::unique_ptr<StepProfile> profile_;  // training.profile only
  LrSchedule schedule_;
  std::unique_ptr<data::DataLoader> train_data_, validation_data_;
  std::unique_ptr<data::StepReader> train_steps_;  // train_data_'s steps, read ahead
  std::deque<StepStats> queued_steps_;  // queued on the engine, not yet finished (at most two)
  std::unique_ptr<MetricsLog> metrics_;
  int64_t step_ = 0, total_steps_ = 0;
  int64_t nonfinite_in_a_row_ = 0;
  // Model FLOPs of a trained token in rows of data.max_length (model/model_flops.h), for the TFLOP/s logged.
  double flops_per_token_ = 0;
  std::optional<int64_t> stop_after_;
  std::filesystem::path last_checkpoint_;
};

// The checkpoints in `output`, oldest first by step number: folders named checkpoint-<digits> holding a
// training_state/trainer_state.json (or, written before that subfolder, trainer_state.json). Anything else (a
// user's checkpoint-best, a half-written .tmp) is not one.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output);

}  // namespace moetune::train
