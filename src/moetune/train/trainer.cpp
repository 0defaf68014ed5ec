#include "moetune/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>

#include "moetune/io/atomic_file.h"
#include "moetune/io/safetensors.h"

namespace moetune::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<bool> Trainer::stop_requested{false};

namespace {

extern "C" void on_stop_signal(int) { Trainer::stop_requested.store(true); }

std::vector<fs::path> resolve(const std::vector<std::string>& files) {
  std::vector<fs::path> paths;
  for (const auto& file : files) paths.emplace_back(file);
  return paths;
}

data::LoaderOptions loader_options(const Recipe& r, bool shuffle) {
  return {data::format_from_name(r.data.format), r.data.loss_on_prompt, r.data.max_length, r.data.packing,
          shuffle,                                r.data.bad_lines == "skip", r.training.micro_batch_size,
          uint64_t(r.training.seed)};
}

// Without max_steps, one pass over the data counts the micro-batches of an epoch (tokenizing each line once).
int64_t count_steps(const Recipe& r, const std::vector<fs::path>& files, const std::vector<data::LineRef>& lines,
                    const data::TextCodec& codec) {
  if (r.training.max_steps > 0) return r.training.max_steps;
  data::DataLoader counter(files, lines, codec, loader_options(r, false));
  int64_t micro_batches = 0;
  while (counter.next(true).input_ids.defined()) ++micro_batches;
  const double steps = double(micro_batches) * r.training.epochs / double(r.training.gradient_accumulation_steps);
  return std::max<int64_t>(1, int64_t(std::ceil(steps)));
}

std::string format_duration(double seconds) {
  const int64_t s = int64_t(seconds);
  return s >= 3600 ? fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60) : fmt::format("{}m{:02d}s", s / 60, s % 60);
}

}  // namespace

std::vector<fs::path> list_checkpoints(const fs::path& output) {
  std::vector<fs::path> checkpoints;
  if (!fs::is_directory(output)) return checkpoints;
  for (const auto& item : fs::directory_iterator(output))
    if (item.is_directory() && item.path().filename().string().starts_with("checkpoint-")) checkpoints.push_back(item.path());
  std::sort(checkpoints.begin(), checkpoints.end());
  return checkpoints;
}

void Trainer::install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

struct Trainer::StepStats {
  double loss = 0, aux_loss = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0, scored = 0;
  bool has_aux = false;
  json moe = json::array();
};

Trainer::Trainer(Recipe recipe, data::TextCodec codec, bool resume) : recipe_(std::move(recipe)), output_(recipe_.output.dir) {
  const Recipe& r = recipe_;
  if (r.model.empty()) fail("the recipe names no model (set model: PATH or --set model=PATH)");
  if (r.data.train.empty()) fail("the recipe names no training data (data.train)");
  engine_ = make_engine(r);
  codec.vocab_size = engine_->spec().vocab_size;
  const std::vector<fs::path> train_files = resolve(r.data.train);
  data::SplitLines split = data::index_lines(train_files, r.data.validation.empty() ? r.data.validation_fraction : 0.0,
                                             uint64_t(r.training.seed));
  total_steps_ = count_steps(r, train_files, split.train, codec);
  train_data_ = std::make_unique<data::DataLoader>(train_files, split.train, codec, loader_options(r, r.data.shuffle));
  if (!r.data.validation.empty()) {
    const std::vector<fs::path> files = resolve(r.data.validation);
    validation_data_ = std::make_unique<data::DataLoader>(files, data::index_lines(files, 0.0, 0).train, codec,
                                                          loader_options(r, false));
  } else if (!split.validation.empty()) {
    validation_data_ = std::make_unique<data::DataLoader>(train_files, split.validation, codec, loader_options(r, false));
  }
  schedule_ = {schedule_kind(r.schedule.type), r.optimizer.lr, r.schedule.warmup_steps, total_steps_, r.schedule.min_lr_ratio};
  if (resume) {
    const auto checkpoints = list_checkpoints(output_);
    if (checkpoints.empty()) fail("{}: --resume, but there is no checkpoint-* folder to resume from", output_.string());
    restore_checkpoint(checkpoints.back());
  } else if (!list_checkpoints(output_).empty()) {
    fail("{} already holds checkpoints: pass --resume to continue that run, or choose another output.dir", output_.string());
  }
  metrics_ = std::make_unique<MetricsLog>(output_, r.logging.tensorboard);
  io::write_text_atomically(output_ / "recipe.json", r.json.dump(2) + "\n");
}

Trainer::~Trainer() = default;

Trainer::StepStats Trainer::train_step() {
  const int64_t accumulation = recipe_.training.gradient_accumulation_steps;
  std::vector<data::MicroBatch> batches;
  int64_t scored = 0;
  for (int64_t i = 0; i < accumulation; ++i) {
    batches.push_back(train_data_->next());
    scored += batches.back().scored;
  }
  StepStats stats;
  stats.lr = schedule_.lr(step_);
  for (const data::MicroBatch& micro : batches) {
    model::Batch batch{micro.input_ids, micro.labels, micro.attention_mask, micro.position_ids, double(std::max<int64_t>(scored, 1)), {}};
    const model::CausalLMOutput out = engine_->forward_backward(batch);
    stats.loss += out.lm_loss;
    if (!std::isnan(out.aux_loss)) {
      stats.aux_loss += out.aux_loss / double(accumulation);
      stats.has_aux = true;
    }
    stats.tokens += micro.tokens;
    stats.moe = json::array();
    for (const auto& [layer, s] : engine_->router_stats()) {
      json record = {{"layer", layer}, {"load_max_over_mean", s.load_max_over_mean},
                     {"load_min_over_mean", s.load_min_over_mean}, {"dropped", s.dropped}};
      if (!std::isnan(s.entropy)) record["router_entropy"] = s.entropy;
      stats.moe.push_back(record);
    }
  }
  stats.scored = scored;
  stats.grad_norm = engine_->optimizer_step(stats.lr, recipe_.optimizer.max_grad_norm);
  ++step_;
  return stats;
}

double Trainer::validate() {
  if (!validation_data_) return NAN;
  validation_data_->restore({});
  double loss_sum = 0;
  int64_t scored = 0;
  while (true) {
    const data::MicroBatch micro = validation_data_->next(/*single_pass=*/true);
    if (!micro.input_ids.defined()) break;
    // Sum over tokens: num_items_in_batch = 1 turns the mean into the sum.
    const model::CausalLMOutput out =
        engine_->evaluate({micro.input_ids, micro.labels, micro.attention_mask, micro.position_ids, 1.0, false});
    loss_sum += out.lm_loss;
    scored += out.num_tokens;
  }
  return scored > 0 ? loss_sum / double(scored) : NAN;
}

void Trainer::log_progress(const StepStats& stats, double seconds) {
  const double tokens_per_second = double(stats.tokens) / std::max(seconds, 1e-9);
  json record = {{"step", step_}, {"loss", stats.loss}, {"lr", stats.lr}, {"grad_norm", stats.grad_norm},
                 {"tokens", stats.tokens}, {"scored_tokens", stats.scored}, {"tokens_per_second", tokens_per_second},
                 {"step_seconds", seconds}, {"epoch", train_data_->epochs_done()},
                 {"skipped_lines", train_data_->skipped_lines()}};
  if (stats.has_aux) record["aux_loss"] = stats.aux_loss;
  if (!stats.moe.empty()) record["moe"] = stats.moe;
  record.update(engine_->memory_metrics());
  metrics_->write(record);
  if (step_ % recipe_.logging.every != 0 && step_ != total_steps_) return;
  const double eta = seconds * double(total_steps_ - step_);
  std::string moe;
  if (!stats.moe.empty()) {
    double worst = 0;
    for (const json& layer : stats.moe) worst = std::max(worst, layer["load_max_over_mean"].get<double>());
    moe = fmt::format(" | expert load max/mean {:.2f}", worst);
  }
  std::fprintf(stderr, "%s", fmt::format("{}step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s{} | ETA {}{}",
                                         isatty(fileno(stderr)) ? "\r" : "", step_, total_steps_, stats.loss, stats.lr,
                                         stats.grad_norm, tokens_per_second, moe, format_duration(eta),
                                         isatty(fileno(stderr)) && step_ != total_steps_ ? "   " : "\n").c_str());
}

void Trainer::save_checkpoint(bool final) {
  const fs::path target = output_ / fmt::format("checkpoint-{:06d}", step_);
  const fs::path temporary = output_ / fmt::format(".checkpoint-{:06d}.tmp", step_);
  fs::remove_all(temporary);
  engine_->save_pretrained(temporary);
  // The exact state: parameters in their training precision (the HF files may be bf16), AdamW moments, step
  // and data position.
  io::save_safetensors(temporary / "training_state.safetensors", engine_->training_state());
  const json trainer_state = {{"step", step_}, {"total_steps", total_steps_}, {"optimizer_steps", engine_->optimizer_steps()},
                              {"data_epoch", train_data_->position().epoch}, {"data_cursor", train_data_->position().cursor},
                              {"skipped_lines", train_data_->skipped_lines()}, {"final", final}, {"recipe", recipe_.json}};
  io::write_text_atomically(temporary / "trainer_state.json", trainer_state.dump(2) + "\n");
  if (fs::exists(target)) fs::remove_all(target);
  fs::rename(temporary, target);  // the checkpoint appears whole or not at all
  last_checkpoint_ = target;
  auto checkpoints = list_checkpoints(output_);
  for (size_t i = 0; i + size_t(recipe_.output.keep_last) < checkpoints.size(); ++i) fs::remove_all(checkpoints[i]);
  std::fprintf(stderr, "saved %s\n", target.string().c_str());
}

void Trainer::restore_checkpoint(const fs::path& checkpoint) {
  const json state = json::parse(std::ifstream(checkpoint / "trainer_state.json"));
  const io::SafetensorsFile tensors = io::SafetensorsFile::open(checkpoint / "training_state.safetensors");
  engine_->restore_training_state(tensors, state["optimizer_steps"].get<int64_t>());
  step_ = state["step"].get<int64_t>();
  train_data_->restore({state["data_epoch"].get<int64_t>(), state["data_cursor"].get<int64_t>()});
  last_checkpoint_ = checkpoint;
  std::fprintf(stderr, "resuming from %s at step %lld\n", checkpoint.string().c_str(), static_cast<long long>(step_));
}

TrainResult Trainer::run() {
  TrainResult result;
  const auto& r = recipe_;
  std::fprintf(stderr, "training %s: %lld steps of %lld x %lld rows of up to %lld tokens, %lld lines\n", r.model.c_str(),
               static_cast<long long>(total_steps_), static_cast<long long>(r.training.gradient_accumulation_steps),
               static_cast<long long>(r.training.micro_batch_size), static_cast<long long>(r.data.max_length),
               static_cast<long long>(train_data_->size()));
  while (step_ < total_steps_) {
    const auto start = std::chrono::steady_clock::now();
    const StepStats stats = train_step();
    log_progress(stats, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    result.last_loss = stats.loss;
    if (r.logging.validation_every > 0 && step_ % r.logging.validation_every == 0 && step_ != total_steps_) {
      const double loss = validate();
      if (!std::isnan(loss)) metrics_->write({{"step", step_}, {"loss", loss}}, "validation");
    }
    const bool stopping = stop_requested.load() || (stop_after_ && step_ >= *stop_after_);
    if (stopping) {
      save_checkpoint(false);
      result.interrupted = true;
      break;
    }
    if (r.output.save_every > 0 && step_ % r.output.save_every == 0 && step_ != total_steps_) save_checkpoint(false);
  }
  if (!result.interrupted) {
    result.validation_loss = validate();
    if (!std::isnan(result.validation_loss)) metrics_->write({{"step", step_}, {"loss", result.validation_loss}}, "validation");
    if (r.output.save_final) save_checkpoint(true);
  }
  result.steps = step_;
  result.final_model = last_checkpoint_;
  return result;
}

}  // namespace moetune::train
