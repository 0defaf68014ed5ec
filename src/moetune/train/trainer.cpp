#include "moetune/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>

#include "moetune/core/device_memory.h"
#include "moetune/data/chat_template_setting.h"
#include "moetune/data/data_files.h"
#include "moetune/data/step_reader.h"
#include "moetune/io/atomic_file.h"
#include "moetune/io/json_file.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/expert_shard.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/model/model_description.h"
#include "moetune/model/model_flops.h"
#include "moetune/model/recompute.h"
#include "moetune/parallel/world.h"
#include "moetune/train/checkpoint_layout.h"
#include "moetune/train/micro_batch_fit.h"
#include "moetune/train/update_in_backward_setting.h"
#include "moetune/train/recipe_data.h"

namespace moetune::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<bool> Trainer::stop_requested{false};

namespace {

extern "C" void on_stop_signal(int) { Trainer::stop_requested.store(true); }

// training.aux_loss: "config" leaves it to config.json's output_router_logits.
std::optional<bool> aux_loss_setting(const std::string& aux_loss) {
  if (aux_loss == "config") return std::nullopt;
  return aux_loss == "on";
}

void stop_if_requested() {
  if (Trainer::stop_requested.load()) throw StartupInterrupted();
}

struct DataSummary {
  int64_t micro_batches = 0;  // in one epoch
  int64_t scored_tokens = 0;
};

// One pass over `lines` before training: a bad line stops the run now instead of at step 42 with the work since
// the last checkpoint lost (or is counted, when bad lines are skipped), and a data set in which the loss scores
// nothing (only the aux loss would move the weights) is refused.
DataSummary read_every_line(const Recipe& r, const std::vector<fs::path>& files, const std::vector<data::LineRef>& lines,
                            const data::TextCodec& codec) {
  data::DataLoader reader(files, lines, codec, recipe_loader_options(r, false));
  DataSummary summary;
  for (data::MicroBatch batch; (batch = reader.next(true)).input_ids.defined();) {
    ++summary.micro_batches;
    summary.scored_tokens += batch.scored;
    stop_if_requested();
  }
  if (summary.scored_tokens == 0)
    fail("{}: no token of the data is scored by the loss ({} of {} lines skipped as bad, the rest fully masked), so "
         "training would learn nothing",
         reader.file_names(), reader.skipped_lines(), reader.size());
  return summary;
}

// max_steps, or the steps of `epochs` passes over the data (a step takes accumulation micro-batches per rank).
int64_t count_steps(const Recipe& r, const DataSummary& data, int ranks) {
  if (r.training.max_steps > 0) return r.training.max_steps;
  const double steps = double(data.micro_batches) * r.training.epochs / double(r.training.gradient_accumulation_steps * ranks);
  return std::max<int64_t>(1, int64_t(std::ceil(steps)));
}

// The step number of a folder named checkpoint-<digits>, else nothing.
std::optional<int64_t> checkpoint_step(const std::string& name) {
  constexpr std::string_view kPrefix = "checkpoint-";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

// An integer of trainer_state.json in [low, high], else an Error naming the file and key.
int64_t state_field(const json& state, const fs::path& path, const char* key, int64_t low, int64_t high) {
  if (!state.is_object() || !state.contains(key) || !state[key].is_number_integer())
    fail("{}: \"{}\" is missing or not an integer", path.string(), key);
  const int64_t value = state[key].get<int64_t>();
  if (value < low || value > high) fail("{}: \"{}\" is {}, outside [{}, {}]", path.string(), key, value, low, high);
  return value;
}

fs::path output_folder(const Recipe& r) {
  require_model_and_data(r);  // before the folder is made
  return r.output.dir;
}

// This process's ranks: alone, or its place in an MPI job split as parallel.expert says.
std::shared_ptr<const parallel::ParallelGroups> trainer_groups(const Recipe& r, std::shared_ptr<parallel::CommunicationClock> clock) {
  const parallel::LaunchInfo launch = parallel::detect_launch();
  // The GPU engine's ranks talk through NCCL, the CPU engine's through MPI.
  std::shared_ptr<parallel::Communicator> world =
      parallel::timed(uses_gpu_engine(r) ? parallel::gpu_world(launch) : parallel::cpu_world(launch), std::move(clock));
  const int64_t experts = model::experts_per_layer(model::load_model_spec(fs::path(r.model) / "config.json"));
  return std::make_shared<parallel::ParallelGroups>(parallel::make_groups(std::move(world), int(r.parallel.expert), experts));
}

// The progress line's GPU part: model TFLOP/s (all ranks together) and the allocator's peak (the largest rank's
// when there are several). Empty on the CPU engine, whose memory_metrics() are empty.
std::string gpu_progress(const json& record) {
  if (!record.contains("gpu_peak_bytes")) return "";
  const double peak = record.value("gpu_peak_bytes_max", record["gpu_peak_bytes"].get<double>());
  return fmt::format(" | {:.1f} TFLOP/s | GPU peak {:.1f} GB", record["model_tflops_per_second"].get<double>(), peak / 1e9);
}

// training.micro_batch_size: auto (train/micro_batch_fit.h): the micro-batch, and recomputation if needed, from the
// memory plan and this GPU's memory.
void fit_micro_batch_to_gpu(Recipe& r, int world, bool log) {
  if (!uses_gpu_engine(r))
    fail("training.micro_batch_size auto sizes the micro-batch to the GPU's memory, so it needs the GPU engine "
         "(training.device cuda); on the CPU set a number");
  if (world > 1)
    fail("training.micro_batch_size auto plans one GPU so far; with {} ranks set a number (`moetune inspect MODEL "
         "--tokens N --expert-parallel E` prints the per-rank plan)",
         world);
  model::ParameterLayout layout = model::parameter_layout(model::load_model_spec(fs::path(r.model) / "config.json"));
  LoraFit lora;
  if (const std::optional<model::LoraConfig> settings = lora_settings(r)) {  // a frozen base, maybe in NF4
    layout = model::with_lora(std::move(layout), *settings);
    lora = {settings->rank, r.lora.quantize == "nf4"};
  }
  const MicroBatchFit fit = fit_micro_batch(layout, precision_plan(r.optimizer.precision, r.optimizer.state),
                                            r.data.max_length, cuda_total_memory_bytes(),
                                            model::parse_recompute(r.training.recompute), updates_in_backward(r, world), lora,
                                            r.training.recompute_keep_layers, r.training.lm_head_chunk_rows);
  if (fit.micro_batch_size == 0) fail("{}", fit.reason);
  r.training.micro_batch_size = fit.micro_batch_size;
  r.training.recompute = model::recompute_name(fit.recompute);
  if (log) std::fprintf(stderr, "%s\n", fit.reason.c_str());
}

std::string format_duration(double seconds) {
  const int64_t s = int64_t(seconds);
  return s >= 3600 ? fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60) : fmt::format("{}m{:02d}s", s / 60, s % 60);
}

}  // namespace

void require_model_and_data(const Recipe& r) {
  if (r.model.empty()) fail("the recipe names no model (set model: PATH or --set model=PATH)");
  if (r.data.train.empty()) fail("the recipe names no training data (data.train)");
}

std::vector<fs::path> list_checkpoints(const fs::path& output) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(output)) return {};
  for (const auto& item : fs::directory_iterator(output)) {
    const std::optional<int64_t> step = checkpoint_step(item.path().filename().string());
    // By number: as strings, checkpoint-1000000 sorts before checkpoint-999999.
    if (step && item.is_directory() && find_training_state(item.path())) found.emplace_back(*step, item.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> checkpoints;
  for (auto& [step, path] : found) checkpoints.push_back(std::move(path));
  return checkpoints;
}

void Trainer::install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

struct Trainer::StepStats {
  int64_t step = 0;  // the step's number (1-based), and the data's epochs and skipped lines after it
  double epochs = 0;
  int64_t skipped_lines = 0;
  double loss = 0, aux_loss = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0, scored = 0;
  double communication_seconds = 0;  // rank 0's time in collectives
  bool has_aux = false;
  json moe = json::array();
};

Trainer::Trainer(Recipe recipe, data::TextCodec codec, bool resume)
    : recipe_(std::move(recipe)), output_(output_folder(recipe_)), groups_(trainer_groups(recipe_, communication_)) {
  const Recipe& r = recipe_;
  if (groups_->layout.world > 1) watchdog_ = std::make_unique<parallel::Watchdog>(r.parallel.timeout_seconds);
  if (is_main()) lock_ = std::make_unique<OutputLock>(output_);
  groups_->world->barrier();  // the folder exists and is this run's before any rank uses it
  if (r.training.micro_batch_auto) fit_micro_batch_to_gpu(recipe_, groups_->layout.world, is_main());
  engine_ = make_engine(r, groups_);
  flops_per_token_ = model::training_flops_per_token(model::parameter_layout(engine_->spec()), r.data.max_length);
  progress("reading the data");
  // The GPU engine clips and steps without reading the gradient norm on the host, so it cannot hold back a
  // NaN update; it stops at the first non-finite step, before any checkpoint of it.
  if (engine_->device().is_cuda() && r.training.max_nonfinite_steps > 0)
    fail("training.max_nonfinite_steps {} needs the CPU engine (the GPU engine cannot skip an update); set it to 0",
         r.training.max_nonfinite_steps);
  stop_if_requested();
  codec.vocab_size = engine_->spec().vocab_size;
  const int64_t positions = engine_->spec().max_position_embeddings;
  if (is_main() && positions > 0 && r.data.max_length > positions)
    std::fprintf(stderr, "warning: data.max_length %lld is above the model's max_position_embeddings %lld\n",
                 static_cast<long long>(r.data.max_length), static_cast<long long>(positions));
  // Decompressed .gz data lives in the run's folder, which the run has locked.
  const int rank = groups_->layout.rank;
  const fs::path scratch = output_ / (rank == 0 ? std::string(".decompressed-data") : fmt::format(".decompressed-data-rank{}", rank));
  std::vector<uint32_t> train_entry_of_file;  // for data.train_weights
  const std::vector<fs::path> train_files = data::resolve_data_files(r.data.train, "data.train", scratch, &train_entry_of_file);
  data::SplitLines split = data::index_lines(train_files, r.data.validation.empty() ? r.data.validation_fraction : 0.0,
                                             uint64_t(r.training.seed));
  total_steps_ = count_steps(r, read_every_line(r, train_files, split.train, codec), groups_->layout.world);
  data::LoaderOptions train_options = recipe_loader_options(r, r.data.shuffle);
  train_options.mixing = data::mixing_from_recipe(r.data.train, r.data.train_weights, train_entry_of_file);
  train_data_ = std::make_unique<data::DataLoader>(train_files, split.train, codec, train_options);
  train_steps_ = std::make_unique<data::StepReader>(*train_data_, r.training.gradient_accumulation_steps * groups_->layout.world);
  if (!r.data.validation.empty()) {
    const std::vector<fs::path> files = data::resolve_data_files(r.data.validation, "data.validation", scratch);
    const std::vector<data::LineRef> lines = data::index_lines(files, 0.0, 0).train;
    read_every_line(r, files, lines, codec);
    validation_data_ = std::make_unique<data::DataLoader>(files, lines, codec, recipe_loader_options(r, false));
  } else if (!split.validation.empty()) {
    read_every_line(r, train_files, split.validation, codec);
    validation_data_ = std::make_unique<data::DataLoader>(train_files, split.validation, codec, recipe_loader_options(r, false));
  }
  progress("start-up");
  schedule_ = {schedule_kind(r.schedule.type), r.optimizer.lr, r.schedule.warmup_steps, total_steps_, r.schedule.min_lr_ratio};
  if (resume) {
    resume_from_newest_checkpoint();
  } else if (!list_checkpoints(output_).empty()) {
    fail("{} already holds checkpoints: pass --resume to continue that run, or choose another output.dir", output_.string());
  }
  stop_if_requested();
  if (!is_main()) return;
  metrics_ = std::make_unique<MetricsLog>(output_, r.logging.tensorboard, step_);
  io::write_text_atomically(output_ / "recipe.json", r.json.dump(2) + "\n");
}

nlohmann::json Trainer::layout_record() const {
  return {{"world", groups_->layout.world}, {"expert", groups_->layout.expert}};
}

bool Trainer::any_rank(bool flag) const {
  return groups_->world->all_reduce_sum(std::vector<double>{flag ? 1.0 : 0.0})[0] > 0;
}

Trainer::~Trainer() = default;

void Trainer::queue_step() {
  const int64_t accumulation = recipe_.training.gradient_accumulation_steps;
  const parallel::ParallelLayout& layout = groups_->layout;
  const double communication_at_start = communication_->seconds;
  // Every rank reads the step's micro-batches of all ranks (same order, same position) and trains its own.
  std::vector<data::MicroBatch> batches;
  int64_t scored = 0, tokens = 0;
  std::vector<data::MicroBatch> step_data = train_steps_->take();
  // The next step's lines are parsed while the GPU runs this one (validation waits for it: the tokenizer is shared).
  if (step_ + 1 < total_steps_) train_steps_->read_ahead();
  for (size_t i = 0; i < step_data.size(); ++i) {
    data::MicroBatch& micro = step_data[i];
    scored += micro.scored;
    tokens += micro.tokens;
    if (int64_t(i) / accumulation == layout.rank) batches.push_back(std::move(micro));
  }
  if (scored == 0)
    std::fprintf(stderr, "warning: step %lld has no token the loss scores: only the aux loss moves the weights\n",
                 static_cast<long long>(step_ + 1));
  StepStats stats;
  stats.lr = schedule_.lr(step_);
  engine_->begin_step(int64_t(batches.size()), stats.lr);
  for (const data::MicroBatch& micro : batches) {
    model::Batch batch{micro.input_ids, micro.labels, micro.attention_mask, micro.position_ids, double(std::max<int64_t>(scored, 1)),
                       aux_loss_setting(recipe_.training.aux_loss)};
    engine_->queue_forward_backward(batch);
  }
  engine_->queue_optimizer_step(stats.lr, recipe_.optimizer.max_grad_norm);
  stats.scored = scored;
  stats.tokens = tokens;
  stats.communication_seconds = communication_->seconds - communication_at_start;
  stats.step = ++step_;
  stats.epochs = train_steps_->epochs_done();
  stats.skipped_lines = train_steps_->skipped_lines();
  queued_steps_.push_back(std::move(stats));
}

Trainer::StepStats Trainer::finish_step() {
  const int64_t accumulation = recipe_.training.gradient_accumulation_steps;
  StepStats stats = std::move(queued_steps_.front());
  queued_steps_.pop_front();
  const double communication_at_start = communication_->seconds;
  const StepReadings readings = engine_->finish_step();
  for (const model::CausalLMOutput& out : readings.micro_batches) {
    stats.loss += out.lm_loss;
    if (!std::isnan(out.aux_loss)) {
      stats.aux_loss += out.aux_loss / double(accumulation);
      stats.has_aux = true;
    }
  }
  for (const auto& [layer, s] : readings.router) {
    json record = {{"layer", layer}, {"load_max_over_mean", s.load_max_over_mean},
                   {"load_min_over_mean", s.load_min_over_mean}, {"dropped", s.dropped}};
    if (!std::isnan(s.entropy)) record["router_entropy"] = s.entropy;
    stats.moe.push_back(record);
  }
  if (groups_->layout.world > 1) {  // each rank's losses are its share of the step's (normalised by all ranks' tokens)
    const std::vector<double> sums = groups_->world->all_reduce_sum({stats.loss, stats.aux_loss});
    stats.loss = sums[0];
    stats.aux_loss = sums[1] / double(groups_->layout.world);
  }
  stats.grad_norm = readings.grad_norm;
  stats.communication_seconds += communication_->seconds - communication_at_start;
  return stats;
}

double Trainer::validate() {
  if (!validation_data_) return NAN;
  train_steps_->wait();  // the read-ahead's loader shares the tokenizer with this one
  validation_data_->restore({});
  double loss_sum = 0;
  int64_t scored = 0;
  // A signal cuts the pass short (the checkpoint matters more than the number); with several ranks every rank
  // finishes it, since their forwards exchange tokens.
  while (groups_->layout.world > 1 || !stop_requested.load()) {
    const data::MicroBatch micro = validation_data_->next(/*single_pass=*/true);
    if (!micro.input_ids.defined()) break;
    // Sum over tokens: num_items_in_batch = 1 turns the mean into the sum.
    const model::CausalLMOutput out =
        engine_->evaluate({micro.input_ids, micro.labels, micro.attention_mask, micro.position_ids, 1.0, false});
    loss_sum += out.lm_loss;
    scored += out.num_tokens;
  }
  return scored > 0 && !stop_requested.load() ? loss_sum / double(scored) : NAN;
}

void Trainer::log_progress(const StepStats& stats, double seconds) {
  const json memory = engine_->memory_metrics();  // collective on several GPUs: every rank asks
  if (!is_main()) return;
  const double tokens_per_second = double(stats.tokens) / std::max(seconds, 1e-9);
  json record = {{"step", stats.step}, {"loss", stats.loss}, {"lr", stats.lr}, {"grad_norm", stats.grad_norm},
                 {"tokens", stats.tokens}, {"scored_tokens", stats.scored}, {"tokens_per_second", tokens_per_second},
                 {"step_seconds", seconds}, {"epoch", stats.epochs},
                 {"skipped_lines", stats.skipped_lines}};
  if (stats.has_aux) record["aux_loss"] = stats.aux_loss;
  if (!stats.moe.empty()) record["moe"] = stats.moe;
  if (groups_->layout.world > 1) {
    record["ranks"] = groups_->layout.world;
    record["tokens_per_second_per_rank"] = tokens_per_second / groups_->layout.world;
    record["communication_seconds"] = stats.communication_seconds;
  }
  record["model_tflops_per_second"] = tokens_per_second * flops_per_token_ / 1e12;
  record.update(memory);
  metrics_->write(record);
  if (stats.step % recipe_.logging.every != 0 && stats.step != total_steps_) return;
  const double eta = seconds * double(total_steps_ - stats.step);
  std::string moe;
  if (!stats.moe.empty()) {
    double worst = 0;
    for (const json& layer : stats.moe) worst = std::max(worst, layer["load_max_over_mean"].get<double>());
    moe = fmt::format(" | expert load max/mean {:.2f}", worst);
  }
  std::fprintf(stderr, "%s", fmt::format("{}step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s{}{} | ETA {}{}",
                                         isatty(fileno(stderr)) ? "\r" : "", stats.step, total_steps_, stats.loss, stats.lr,
                                         stats.grad_norm, tokens_per_second, gpu_progress(record), moe, format_duration(eta),
                                         isatty(fileno(stderr)) && stats.step != total_steps_ ? "   " : "\n").c_str());
}

void Trainer::save_checkpoint(bool final) {
  progress("a checkpoint");
  const fs::path target = output_ / fmt::format("checkpoint-{:06d}", step_);
  const fs::path temporary = output_ / fmt::format(".checkpoint-{:06d}.tmp", step_);
  const fs::path state_folder = temporary / kTrainingStateFolder;
  if (is_main()) {
    fs::remove_all(temporary);
    fs::create_directories(state_folder);  // before any rank writes into it
  }
  groups_->world->barrier();
  engine_->save_pretrained(temporary);  // every rank its share
  // The exact state: parameters in their training precision (the HF files may be bf16), AdamW moments, step
  // and data position; each rank's shard of it in its own file.
  io::save_safetensors(state_folder / training_state_file(groups_->layout.rank, groups_->layout.world),
                       engine_->training_state());
  groups_->world->barrier();  // every rank's files are written
  last_checkpoint_ = target;
  if (is_main()) {
    const json trainer_state = {{"step", step_}, {"total_steps", total_steps_}, {"optimizer_steps", engine_->optimizer_steps()},
                                {"data_epoch", train_steps_->position().epoch}, {"data_cursor", train_steps_->position().cursor},
                                {"skipped_lines", train_steps_->skipped_lines()}, {"final", final}, {"parallel", layout_record()},
                                {"recipe", recipe_.json}};
    io::write_text_atomically(state_folder / kTrainerStateFile, trainer_state.dump(2) + "\n");
    // The template the run trained with goes with the model (transformers reads chat_template.jinja before
    // tokenizer_config.json's), so that the model is prompted as it learned.
    if (!recipe_.data.chat_template.empty())
      io::write_text_atomically(temporary / "chat_template.jinja", data::chat_template_source(recipe_.data.chat_template));
    if (fs::exists(target)) fs::remove_all(target);
    fs::rename(temporary, target);  // the checkpoint appears whole or not at all
    auto checkpoints = list_checkpoints(output_);
    for (size_t i = 0; i + size_t(recipe_.output.keep_last) < checkpoints.size(); ++i) fs::remove_all(checkpoints[i]);
    std::fprintf(stderr, "saved %s\n", target.string().c_str());
  }
  groups_->world->barrier();
}

void Trainer::resume_from_newest_checkpoint() {
  const auto checkpoints = list_checkpoints(output_);
  if (checkpoints.empty()) fail("{}: --resume, but there is no checkpoint-* folder to resume from", output_.string());
  // A damaged newest checkpoint (a file deleted or edited by hand) falls back to the one before it.
  std::string newest_reason;
  for (auto checkpoint = checkpoints.rbegin(); checkpoint != checkpoints.rend(); ++checkpoint) {
    std::string reason;
    try {
      restore_checkpoint(*checkpoint);
    } catch (const Error& e) {
      reason = e.what();
    }
    // Every rank resumes from the same checkpoint: one rank's damaged shard sends all of them back.
    if (!any_rank(!reason.empty())) {
      engine_->finish_restore();
      return;
    }
    if (reason.empty()) reason = "another rank cannot read its part of it";
    std::fprintf(stderr, "warning: %scannot resume from %s: %s\n", parallel::rank_prefix().c_str(), checkpoint->string().c_str(),
                 reason.c_str());
    if (newest_reason.empty()) newest_reason = reason;
  }
  fail("{}: none of its {} checkpoint(s) can be resumed from; the newest: {}", output_.string(), checkpoints.size(),
       newest_reason);
}

void Trainer::restore_checkpoint(const fs::path& checkpoint) {
  const std::optional<fs::path> state_folder = find_training_state(checkpoint);
  if (!state_folder) fail("{}: no {}/{} (was it deleted?)", checkpoint.string(), kTrainingStateFolder, kTrainerStateFile);
  const fs::path state_path = *state_folder / kTrainerStateFile;
  const json state = io::read_json_file(state_path);
  constexpr int64_t kMax = int64_t(1) << 62;
  const int64_t step = state_field(state, state_path, "step", 0, kMax);
  const int64_t optimizer_steps = state_field(state, state_path, "optimizer_steps", 0, step);
  const data::DataPosition position{state_field(state, state_path, "data_epoch", 0, kMax),
                                    state_field(state, state_path, "data_cursor", 0, train_data_->size())};
  const int64_t skipped = state_field(state, state_path, "skipped_lines", 0, kMax);
  // A checkpoint without the record is a one-rank run's.
  const json saved_layout = state.contains("parallel") ? state["parallel"] : json{{"world", 1}, {"expert", 1}};
  if (saved_layout != layout_record())
    fail("{}: written by a run of {} rank(s) with parallel.expert {}, but this run has {} rank(s) with parallel.expert {}; "
         "resume with the layout it was written with",
         state_path.string(), saved_layout.value("world", json(0)).dump(), saved_layout.value("expert", json(0)).dump(),
         groups_->layout.world, groups_->layout.expert);
  const io::SafetensorsFile tensors =
      io::SafetensorsFile::open(*state_folder / training_state_file(groups_->layout.rank, groups_->layout.world));
  with_context(tensors.path().string(), [&] { engine_->restore_training_state(tensors, optimizer_steps); });
  step_ = step;
  train_steps_->restore(position, skipped);
  last_checkpoint_ = checkpoint;
  if (is_main())
    std::fprintf(stderr, "resuming from %s at step %lld\n", checkpoint.string().c_str(), static_cast<long long>(step_));
}

void Trainer::check_finite(const StepStats& stats) {
  if (std::isfinite(stats.loss) && std::isfinite(stats.grad_norm)) {
    nonfinite_in_a_row_ = 0;
    return;
  }
  ++nonfinite_in_a_row_;
  // A NaN's sign bit only records which operation made it (and the compiler's operand order), so it is not printed.
  auto plain = [](double x) { return std::isnan(x) ? std::string("nan") : fmt::format("{}", x); };
  const std::string what =
      fmt::format("step {}: the loss is {} and the gradient norm {}", stats.step, plain(stats.loss), plain(stats.grad_norm));
  if (nonfinite_in_a_row_ > recipe_.training.max_nonfinite_steps)
    fail("{} ({} such step(s) in a row, training.max_nonfinite_steps is {}); stopped without saving this state. Look for "
         "NaN/Inf weights in the model, a learning rate too high, or raise training.max_nonfinite_steps to skip such steps",
         what, nonfinite_in_a_row_, recipe_.training.max_nonfinite_steps);
  std::fprintf(stderr, "warning: %s; the update was skipped (%lld in a row)\n", what.c_str(),
               static_cast<long long>(nonfinite_in_a_row_));
}

TrainResult Trainer::run() {
  TrainResult result;
  const auto& r = recipe_;
  if (stop_requested.load()) {  // stopped before the first step: there is nothing new to save
    result = {step_, true, NAN, NAN, last_checkpoint_};
    return result;
  }
  if (is_main())
    std::fprintf(stderr, "training %s: %lld steps of %lld x %lld rows of up to %lld tokens, %lld lines%s\n", r.model.c_str(),
                 static_cast<long long>(total_steps_), static_cast<long long>(r.training.gradient_accumulation_steps),
                 static_cast<long long>(r.training.micro_batch_size), static_cast<long long>(r.data.max_length),
                 static_cast<long long>(train_data_->size()),
                 groups_->layout.world > 1 ? (" on " + groups_->layout.str()).c_str() : "");
  if (r.training.profile && engine_->device().is_cuda()) profile_ = std::make_unique<StepProfile>();
  // The host queues step N, then reads and logs step N-1 while the GPU runs N, so the GPU does not wait for the
  // host's reads, logging and next batch between steps (the GPU engine's numbers come back without a host wait
  // until finish_step). Step N itself is finished before anything that must see it: validation, a checkpoint,
  // a stop, the end; and at once when profiling, whose phases are read per step.
  auto finished_at = std::chrono::steady_clock::now();
  const auto finish_oldest = [&] {
    const StepStats stats = finish_step();
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - finished_at).count();
    finished_at = now;
    if (profile_) profile_->step_done(seconds);
    log_progress(stats, seconds);
    check_finite(stats);
    result.last_loss = stats.loss;
  };
  while (step_ < total_steps_) {
    progress("a training step");
    if (queued_steps_.empty()) finished_at = std::chrono::steady_clock::now();  // nothing in flight: its time starts now
    queue_step();
    if (queued_steps_.size() > 1) finish_oldest();
    const bool validating = r.logging.validation_every > 0 && step_ % r.logging.validation_every == 0 && step_ != total_steps_;
    const bool saving = r.output.save_every > 0 && step_ % r.output.save_every == 0 && step_ != total_steps_;
    if (validating || saving || step_ == total_steps_ || profile_) finish_oldest();
    if (validating) {
      progress("validation");
      const double loss = validate();
      if (!std::isnan(loss) && metrics_) metrics_->write({{"step", step_}, {"loss", loss}}, "validation");
    }
    // Every rank stops at the same step (a signal may reach only some of them, or land in the validation).
    if (any_rank(stop_requested.load() || (stop_after_ && step_ >= *stop_after_))) {
      if (!queued_steps_.empty()) finish_oldest();
      save_checkpoint(false);
      result.interrupted = true;
      break;
    }
    if (saving) save_checkpoint(false);
  }
  if (!result.interrupted) {
    progress("validation");
    result.validation_loss = validate();
    if (!std::isnan(result.validation_loss) && metrics_)
      metrics_->write({{"step", step_}, {"loss", result.validation_loss}}, "validation");
    if (r.output.save_final) save_checkpoint(true);
  }
  if (profile_ && is_main()) profile_->report(output_);
  result.steps = step_;
  result.final_model = last_checkpoint_;
  if (!result.interrupted && r.output.save_final) {
    result.final_model = output_ / "final-model";
    progress("the final model");
    if (is_main()) {
      export_final_model(last_checkpoint_, result.final_model);
      std::fprintf(stderr, "final model (without the training state): %s\n", result.final_model.string().c_str());
    }
    groups_->world->barrier();
  }
  return result;
}

}  // namespace moetune::train
