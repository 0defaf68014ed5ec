// The GPU engine: the bf16 model on one GPU, gradient clipping and AdamW without a host round trip (the clip
// coefficient stays on the device), in the precision the recipe names. On several ranks (one GPU each, NCCL
// between them) the experts are split over the expert-parallel group and the optimizer is ZeRO-2: each flat
// run of gradients is reduce-scattered over its group (the world for dense parameters, the expert's replicas
// for the experts), AdamW updates this rank's shard with state for the shard alone, and the run is
// all-gathered back in place.
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/flat_buffers.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/cuda/all_to_all_dispatcher.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/cuda/expert_norm_partials.h"
#include "moetune/model/cuda/nf4_base.h"
#include "moetune/model/device_support.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/model_description.h"
#include "moetune/ops/adamw_math.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/adamw_rows.h"
#include "moetune/ops/cuda/grad_norm.h"
#include "moetune/train/engine.h"
#include "moetune/train/cuda/gradient_buckets.h"
#include "moetune/train/cuda/overlapped_grad_norm.h"
#include "moetune/train/cuda/queued_readings.h"
#include "moetune/train/cuda/update_in_backward.h"
#include "moetune/train/update_in_backward_setting.h"
#include "moetune/train/parallel_save.h"

namespace moetune::train {
namespace {

// ZeRO's buckets: about 32 M elements (64 MB of bf16 gradients), large enough that NCCL runs near its bandwidth,
// small enough that the LM head's reduction starts while the layers' backward passes run.
constexpr int64_t kBucketElements = int64_t(32) << 20;


class GpuEngine final : public TrainingEngine {
 public:
  GpuEngine(const Recipe& r, std::shared_ptr<const parallel::ParallelGroups> groups)
      : groups_(std::move(groups)),
        overlap_(r.parallel.overlap),
        update_in_backward_(updates_in_backward(r, groups_->layout.world)),
        model_(model::cuda::CausalLM::from_weights(
            load_weights(r), dispatcher_factory(),
            update_in_backward_ ? model::GradientStorage::LayerArena : model::GradientStorage::Flat)),
        precision_(ops::cuda::parse_optimizer_precision(r.optimizer.precision)),
        int8_state_(r.optimizer.state == "int8"),
        options_(r.optimizer),
        seed_(uint64_t(r.training.seed)),
        router_bias_rate_(r.training.router_bias_update_rate) {
    auto& values = model_.parameters().values();
    auto& grads = model_.parameters().grads();
    if (parallel()) {
      for (size_t i = 0; i < values.size(); ++i)
        if (!grads[i].defined()) {
          const model::ParameterSpec& spec = model_.weights().layout.parameters[i];
          if (spec.role == model::ParameterRole::Buffer)
            fail("'{}' is a frozen buffer; the GPU engine on several ranks does not carry frozen tensors yet (train "
                 "on one GPU, or on the CPU engine)", spec.name);
          fail("parameter '{}' is frozen: the GPU engine freezes parameters on one rank only so far (training.freeze "
               "with several ranks runs nowhere yet; drop it or run one rank)",
               spec.name);
        }
      make_sharded_slots();
    } else {
      // A frozen parameter (training.freeze, LoRA's base) or buffer (DeepSeek-V3's router correction bias) has no
      // gradient: no slot, no optimizer state.
      std::vector<Tensor> params, gradients;
      for (size_t i = 0; i < values.size(); ++i)
        if (grads[i].defined()) {
          params.push_back(values[i]);
          gradients.push_back(grads[i]);
          slot_names_.push_back(model_.weights().layout.parameters[i].name);
        }
      make_slots(params, gradients);
      if (r.optimizer.lazy_embedding == "auto") make_lazy_embedding();
      if (update_in_backward_) {
        update_ = std::make_unique<cuda::UpdateInBackward>(model_.parameters(), slots_, slot_names_, precision_, seed_, int8_state_);
        model_.on_gradients_done([this](int64_t layer) { update_->layer_done(layer); });
      } else if (r.optimizer.norm_in_backward == "on" && r.optimizer.max_grad_norm > 0) {
        start_norm_in_backward(gradients);
      } else if (r.optimizer.max_grad_norm > 0 && r.optimizer.norm_from_expert_gemms == "on") {
        // The norm pass after the backward pass: the experts' weight gradients bring their own sums.
        expert_norms_ = std::make_unique<model::cuda::ExpertNormPartials>();
        model_.set_expert_norm_partials(expert_norms_.get());
      }
    }
    if (router_bias_rate_ > 0) {
      if (parallel()) fail("training.router_bias_update_rate is not yet supported with several ranks");
      model_.check_router_correction_biases();
    }
    if (nf4_) {  // QLoRA: each layer's base dequantized before its forward and again before its backward
      model_.on_parameters_needed([this](int64_t layer) { nf4_->dequantize_layer(layer); });
      model_.on_layer_backward([this](int64_t layer) { nf4_->dequantize_layer(layer); });
    }
    model_.set_recompute(model::parse_recompute(r.training.recompute), r.training.recompute_keep_layers);
    model_.set_lm_head_chunk_rows(r.training.lm_head_chunk_rows);
    norm_squared_ = Tensor::empty({1}, DType::F32, Device::cuda());
    coefficient_ = Tensor::empty({1}, DType::F32, Device::cuda());
  }

  const model::ModelSpec& spec() const override { return model_.spec(); }
  Device device() const override { return Device::cuda(); }
  void begin_step(int64_t micro_batches, double lr) override {
    micro_batches_ = micro_batches;
    micro_batch_ = 0;
    if (expert_norms_) expert_norms_->take();  // claims live within one step
    model_.set_lora_draw(uint64_t(steps_) << 20);  // LoRA dropout's masks follow the step, as on the CPU
    if (update_) {
      MOETUNE_CHECK(micro_batches == 1, "optimizer.update_in_backward with {} micro-batches in a step", micro_batches);
      update_->begin_step({lr, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, ++steps_});
    }
  }
  model::CausalLMOutput forward_backward(const model::Batch& batch) override {
    begin_micro_batch();
    model::CausalLMOutput out = model_.forward_backward(batch);
    if (router_bias_rate_ > 0) model_.add_expert_load(pending_load_);
    return out;
  }
  // The trainer's step: nothing waits for the GPU until finish_step (the router-bias update, the update in the
  // backward pass and several ranks' host-side collectives still read what they need when they need it).
  void queue_forward_backward(const model::Batch& batch) override {
    begin_micro_batch();
    readings_.add_micro_batch(model_.queue_forward_backward(batch));
    if (router_bias_rate_ > 0) model_.add_expert_load(pending_load_);
  }
  void queue_optimizer_step(double lr, double max_grad_norm) override {
    const std::vector<std::pair<int64_t, Tensor>> counts = model_.router_counts();  // this step's (held: the next forward makes new ones)
    if (update_) return readings_.close_step(counts, Tensor(), optimizer_step(lr, max_grad_norm));
    step_parameters(lr, max_grad_norm);
    readings_.close_step(counts, norm_squared_);
  }
  StepReadings finish_step() override { return readings_.take(); }
  model::CausalLMOutput evaluate(const model::Batch& batch) override { return model_.loss(batch); }
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override { return model_.router_stats(); }

  double optimizer_step(double lr, double max_grad_norm) override {
    if (update_) {  // the backward pass took the step
      model_.zero_grad();
      move_router_biases();
      return update_->gradient_norm();
    }
    step_parameters(lr, max_grad_norm);
    const Tensor host = norm_squared_.to(Device::cpu());  // waits for the step
    return std::sqrt(double(host.data<float>()[0]));
  }
  // optimizer_step's work without the wait: norm_squared_ then holds the gradient norm's square.
  void step_parameters(double lr, double max_grad_norm) {
    PhaseScope phase("optimizer.reduce_wait");
    std::vector<Tensor> gradients;
    if (parallel()) {
      reduction_->finish();
      for (const cuda::GradientBucket& bucket : reduction_->buckets()) gradients.push_back(bucket.gradient_shard);
    } else {
      for (const Tensor& g : model_.parameters().grads())
        if (g.defined()) gradients.push_back(g);  // a frozen parameter has none
    }
    Tensor scale;
    const bool clipping = max_grad_norm > 0;
    if (clipping) {
      phase.next("optimizer.norm");
      gradient_norm_squared(gradients);
      // Each gradient element is in one rank's shard: the world's sum is the whole model's.
      if (parallel()) groups_->world->all_reduce_sum(norm_squared_);
      ops::cuda::clip_coefficient(norm_squared_, max_grad_norm, coefficient_);
      scale = coefficient_;
    }
    ++steps_;
    phase.next("optimizer.adamw");
    // Without clipping the norm is only reported: the step sums it as it reads the gradients, no pass of its own.
    ops::cuda::adamw_step(slots_, {lr, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, steps_},
                          precision_, scale, seed_, int8_state_, clipping ? Tensor() : norm_squared_, lazy_.get());
    if (!clipping && parallel()) groups_->world->all_reduce_sum(norm_squared_);
    move_router_biases();
    phase.next("optimizer.gather");
    if (overlap_ && reduction_)
      reduction_->start_gathering_parameters();  // the next forward pass waits for each layer's part
    else
      gather_parameters();
    phase.next("optimizer.zero_grad");
    model_.zero_grad();
    phase.end();
  }
  int64_t optimizer_steps() const override { return steps_; }
  void save_pretrained(const std::filesystem::path& folder) const override {
    if (reduction_) reduction_->wait_for_parameters();
    if (lazy_) lazy_->flush(steps_);
    if (model_.weights().lora) return save_adapter(folder);  // one rank: the adapter alone
    save_on_ranks(model_.weights(), groups_->layout, folder, [&] { model_.save_pretrained(folder); });
  }

  io::NamedTensors training_state() const override {
    if (reduction_) reduction_->wait_for_parameters();
    if (lazy_) lazy_->flush(steps_);
    io::NamedTensors state;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const std::string& name = slot_names_[i];
      state.emplace_back("param." + name, slots_[i].param.to(Device::cpu()));
      state.emplace_back("adam_m." + name, slots_[i].exp_avg.to(Device::cpu()));
      state.emplace_back("adam_v." + name, slots_[i].exp_avg_sq.to(Device::cpu()));
      if (slots_[i].master.defined()) state.emplace_back("master." + name, slots_[i].master.to(Device::cpu()));
      if (int8_state_) {
        state.emplace_back("adam_m_absmax." + name, slots_[i].exp_avg_absmax.to(Device::cpu()));
        state.emplace_back("adam_v_absmax." + name, slots_[i].exp_avg_sq_absmax.to(Device::cpu()));
      }
    }
    return state;
  }
  void restore_training_state(const io::SafetensorsFile& file, int64_t optimizer_steps) override {
    if (reduction_) reduction_->wait_for_parameters();
    for (size_t i = 0; i < slots_.size(); ++i) {
      const std::string& name = slot_names_[i];
      restore(slots_[i].param, file, "param." + name);
      restore(slots_[i].exp_avg, file, "adam_m." + name);
      restore(slots_[i].exp_avg_sq, file, "adam_v." + name);
      if (slots_[i].master.defined()) restore(slots_[i].master, file, "master." + name);
      if (int8_state_) {
        restore(slots_[i].exp_avg_absmax, file, "adam_m_absmax." + name);
        restore(slots_[i].exp_avg_sq_absmax, file, "adam_v_absmax." + name);
      }
    }
    steps_ = optimizer_steps;
    if (lazy_) lazy_->reset(steps_);
  }
  void finish_restore() override { gather_parameters(); }

  nlohmann::json memory_metrics() const override {
    const gpu::MemoryStats stats = gpu::memory_stats();
    nlohmann::json metrics = {{"gpu_peak_bytes", stats.peak_in_use}, {"gpu_reserved_peak_bytes", stats.peak_reserved},
                              {"gpu_device_used_bytes", gpu::device_used_bytes()}};
    if (parallel()) {  // the spread of the ranks' peaks
      const std::vector<double> peaks = groups_->world->all_reduce_sum(peak_vector(double(stats.peak_in_use)));
      metrics["gpu_peak_bytes_max"] = *std::max_element(peaks.begin(), peaks.end());
      metrics["gpu_peak_bytes_min"] = *std::min_element(peaks.begin(), peaks.end());
    }
    return metrics;
  }

 private:
  bool parallel() const { return groups_->layout.world > 1; }
  // The recipe's weights in bf16 on this GPU; with lora.quantize nf4 (QLoRA) the frozen base goes to nf4_ as it
  // is read, and its parameters become views of nf4_'s scratch.
  model::ModelWeights load_weights(const Recipe& r) {
    if (r.lora.quantize != "nf4") return load_for_training(r, groups_->layout, DType::BF16, Device::cuda());
    if (parallel()) fail("lora.quantize nf4 (QLoRA) runs on one GPU so far; run one rank");
    nf4_ = std::make_unique<model::cuda::Nf4Base>();
    const auto start = std::chrono::steady_clock::now();
    model::ModelWeights weights = load_for_training(r, groups_->layout, DType::BF16, Device::cuda(), [this](model::LoadOptions& o) {
      o.held_elsewhere = &model::cuda::Nf4Base::holds;
      o.take = [this](size_t index, const Tensor& host) { nf4_->take(index, host); };
    });
    nf4_->place(weights);
    if (groups_->layout.rank == 0)
      std::fprintf(stderr, "QLoRA: %zu frozen weights read and held in NF4 (%.2f GB on the GPU, + %.2f GB of bf16 scratch for one layer) in %.1f s\n",
                   nf4_->weights_held(), double(nf4_->nf4_bytes()) / 1e9, double(nf4_->scratch_bytes()) / 1e9,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return weights;
  }
  model::DispatcherFactory<model::cuda::GpuBlocks> dispatcher_factory() const {
    if (groups_->layout.expert == 1) return {};
    return [group = groups_->expert_parallel, overlap = overlap_](int64_t experts) {
      return std::make_unique<model::cuda::AllToAllDispatcher>(experts, group, overlap);
    };
  }
  // This rank's peak at its own position, zeros elsewhere: summed over the ranks, every rank's peak.
  std::vector<double> peak_vector(double peak) const {
    std::vector<double> peaks(size_t(groups_->layout.world), 0.0);
    peaks[size_t(groups_->layout.rank)] = peak;
    return peaks;
  }

  // One rank, clipping: the norm's pass over the gradients runs during the last micro-batch's backward pass, each
  // layer's as soon as it is done (train/cuda/overlapped_grad_norm.h); optimizer.norm_in_backward on only.
  void start_norm_in_backward(const std::vector<Tensor>& gradients) {
    norm_in_backward_ = std::make_unique<cuda::OverlappedGradNorm>(gradients, slot_names_, model_.spec().num_layers());
    // The lazily updated embedding's gradient is read in its step's rows only, at the optimizer's turn.
    if (lazy_) norm_in_backward_->read_at_finish(lazy_->position());
    model_.on_gradients_done([this](int64_t layer) { norm_in_backward_->layer_done(layer); });
  }
  // Σ g² of `gradients` into norm_squared_: what the backward pass started, finished, or one pass now. The
  // same bits either way.
  void gradient_norm_squared(const std::vector<Tensor>& gradients) {
    // The lazily updated embedding's gradient is zero outside the rows its step updates: only those are read.
    const ops::cuda::MarkedRows embedding_rows = lazy_ ? ops::cuda::MarkedRows{lazy_->position(), lazy_->marked_rows()}
                                                       : ops::cuda::MarkedRows{};
    const ops::cuda::MarkedRows* sparse = lazy_ ? &embedding_rows : nullptr;
    if (norm_in_backward_) return norm_in_backward_->finish(norm_squared_, sparse);
    if (!expert_norms_) return ops::cuda::grad_norm_squared(gradients, norm_squared_, sparse);
    // The gradients whose grouped GEMM summed their squares this step are left out of the pass; their partials
    // go first, in the list's order (the same order every step).
    const std::map<const void*, Tensor> summed = expert_norms_->take();
    std::vector<Tensor> rest, precomputed;
    std::optional<ops::cuda::MarkedRows> rest_rows;
    for (size_t i = 0; i < gradients.size(); ++i) {
      if (const auto found = summed.find(gradients[i].raw_data()); found != summed.end()) {
        precomputed.push_back(found->second);
        continue;
      }
      if (sparse && sparse->index == i) rest_rows = ops::cuda::MarkedRows{rest.size(), sparse->marked};
      rest.push_back(gradients[i]);
    }
    MOETUNE_CHECK(precomputed.size() == summed.size(), "{} expert gradients summed their squares, {} of them are clipped",
                  summed.size(), precomputed.size());
    const PhaseScope phase(precomputed.empty() ? "optimizer.norm (pass)" : "optimizer.norm (experts' sums from their GEMMs)");
    ops::cuda::grad_norm_squared(rest, norm_squared_, rest_rows ? &*rest_rows : nullptr, precomputed);
  }
  // Before each micro-batch's forward and backward pass: the step's last one starts the reductions (several
  // ranks) or the norm's partials (one rank) as its backward pass finishes each layer.
  void begin_micro_batch() {
    const bool last = ++micro_batch_ == micro_batches_;
    if (reduction_) reduction_->begin_micro_batch(last);
    if (norm_in_backward_) norm_in_backward_->begin_micro_batch(last);
    // Only a step of one micro-batch: its backward pass writes the expert gradients whole, and last.
    if (expert_norms_) expert_norms_->arm(micro_batches_ == 1);
  }

  // AdamW's moments (and fp32 master weights) in flat buffers, one view per slot; 8-bit moments with their
  // blocks' absmax values (zero: the moments start at zero).
  // After each optimizer step (in the backward pass or here), as the CPU engine moves them.
  void move_router_biases() {
    if (router_bias_rate_ <= 0) return;
    model_.update_router_bias(router_bias_rate_, pending_load_);
    pending_load_.clear();
  }

  void make_slots(const std::vector<Tensor>& params, const std::vector<Tensor>& gradients) {
    const bool master = precision_ == ops::cuda::OptimizerPrecision::Fp32Master;
    const DType moment_dtype = int8_state_ ? DType::U8 : master ? DType::F32 : DType::BF16;
    std::vector<FlatRequest> moments, masters, absmax;
    for (const Tensor& param : params) {
      moments.push_back({param.shape(), moment_dtype});
      masters.push_back({param.shape(), DType::F32, master});
      absmax.push_back({{ops::adamw_state_blocks(param.numel())}, DType::F32, int8_state_});
    }
    exp_avg_ = allocate_flat(moments, Device::cuda(), /*zeroed=*/true);
    exp_avg_sq_ = allocate_flat(moments, Device::cuda(), /*zeroed=*/true);
    master_ = allocate_flat(masters, Device::cuda(), /*zeroed=*/false);
    exp_avg_absmax_ = allocate_flat(absmax, Device::cuda(), /*zeroed=*/true);
    exp_avg_sq_absmax_ = allocate_flat(absmax, Device::cuda(), /*zeroed=*/true);
    for (size_t i = 0; i < params.size(); ++i) {
      ops::cuda::AdamWSlot slot{params[i], gradients[i], exp_avg_.views[i], exp_avg_sq_.views[i], master_.views[i],
                                exp_avg_absmax_.views[i], exp_avg_sq_absmax_.views[i]};
      // The checkpoint's own values would be more exact than their bf16 copy; the bf16 model is what we hold.
      if (master) ops::cast_into(params[i], slot.master);
      slots_.push_back(std::move(slot));
    }
  }

  // One slot per bucket: this rank's piece of its parameters (a view: the update lands in place, and the
  // all-gather fills in the other ranks' pieces around it) and of its gradients.
  void make_sharded_slots() {
    std::vector<cuda::GradientBucket> buckets;
    const auto add = [&](const char* name, const std::vector<Tensor>& values, const std::vector<Tensor>& grads,
                         std::shared_ptr<parallel::Communicator> group) {
      MOETUNE_CHECK(values.size() == grads.size() && values.size() <= 1, "ZeRO run '{}': {} parameter runs", name, values.size());
      if (values.empty()) return;
      for (cuda::GradientBucket& b : cuda::make_gradient_buckets(name, values[0], grads[0], group, model_.weights().layout,
                                                                 model_.parameters().grads(), kBucketElements))
        buckets.push_back(std::move(b));
    };
    add("replicated", model_.weights().replicated_runs.buffers, model_.parameters().replicated_grad_runs(), groups_->world);
    add("experts", model_.weights().expert_runs.buffers, model_.parameters().expert_grad_runs(), groups_->expert_replicas);
    reduction_ = std::make_unique<cuda::BucketedReduction>(std::move(buckets));
    if (overlap_) {
      model_.on_gradients_done([this](int64_t layer) { reduction_->layer_done(layer); });
      model_.on_parameters_needed([this](int64_t layer) { reduction_->layer_needed(layer); });
    }
    std::vector<Tensor> params, gradients;
    for (const cuda::GradientBucket& bucket : reduction_->buckets()) {
      params.push_back(bucket.parameter_shard);
      gradients.push_back(bucket.gradient_shard);
      slot_names_.push_back("zero." + bucket.name);
    }
    make_slots(params, gradients);
  }

  // PEFT's files from the adapters' fp32 host copies (what the CPU engine writes; PEFT loads either precision).
  void save_adapter(const std::filesystem::path& folder) const {
    model::ModelWeights host = model_.weights();  // the tensors are shared handles: only the adapters are copied
    for (size_t i = 0; i < host.parameters.size(); ++i)
      if (host.layout.parameters[i].trainable) host.parameters[i] = ops::cast(host.parameters[i].to(Device::cpu()), DType::F32);
    model::save_adapter(host, folder);
  }

  // optimizer.lazy_embedding auto: AdamW on the embedding's rows of the step's tokens only (ops/cuda/adamw_rows.h),
  // where that is simple and safe: one rank (make_slots, not the ZeRO shards), the step after the backward pass,
  // full-precision moments (8-bit ones are coded in blocks of 256), a trainable embedding that the LM head does
  // not share (a tied head's gradient is dense) and rows of a multiple of 8 elements.
  void make_lazy_embedding() {
    if (update_in_backward_ || int8_state_ || model_.spec().tie_word_embeddings) return;
    const model::Param embedding = model_.parameters().get("embed_tokens");
    if (!embedding.grad.defined() || embedding.value.dim() != 2 || embedding.value.size(1) % 8 != 0) return;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].param.raw_data() == embedding.value.raw_data()) {
        lazy_ = std::make_unique<ops::cuda::AdamWLazyRows>(slots_[i], i, precision_, seed_, steps_);
        // Every lookup brings its rows to the steps taken and marks them for the next step, whose update zeroes
        // their gradient rows (the others stay zero): zero_grad leaves the table's gradient alone.
        model_.on_embedding_lookup([this](const Tensor& ids) { lazy_->catch_up(ids, steps_); });
        model_.keep_gradient_in_zero_grad(embedding.grad);
        std::fprintf(stderr, "optimizer.lazy_embedding: AdamW on the input embedding's rows of each step's tokens only "
                     "(%lld rows; the others brought up to date when read, bit for bit as the update of every row)\n",
                     static_cast<long long>(embedding.value.size(0)));
        return;
      }
  }

  void gather_parameters() {
    if (reduction_) reduction_->gather_parameters();
  }

  // A checkpoint of another precision mode converts (an fp32 CPU checkpoint resumed on the GPU, say); 8-bit
  // codes do not convert to or from values.
  static void restore(Tensor target, const io::SafetensorsFile& file, const std::string& name) {
    if (!file.contains(name))
      fail("no tensor '{}' (a checkpoint of another model or layout, or saved with another optimizer.state?)", name);
    const Tensor saved = file.tensor(name);
    MOETUNE_CHECK(saved.shape() == target.shape(), "{}: '{}' is {} in the checkpoint but {} in the model",
                  file.path().filename().string(), name, saved.str(), target.str());
    if ((saved.dtype() == DType::U8) != (target.dtype() == DType::U8))
      fail("{}: '{}' is {} in the checkpoint but {} here: resume with the optimizer.state the run was saved with",
           file.path().filename().string(), name, dtype_name(saved.dtype()), dtype_name(target.dtype()));
    const Tensor converted = saved.dtype() == target.dtype() ? saved : ops::cast(saved, target.dtype());
    target.copy_from(converted);
  }

  std::shared_ptr<const parallel::ParallelGroups> groups_;
  bool overlap_;  // parallel.overlap
  bool update_in_backward_;  // optimizer.update_in_backward, resolved
  std::unique_ptr<model::cuda::Nf4Base> nf4_;  // QLoRA's base (before model_: load_weights makes it)
  model::cuda::CausalLM model_;
  ops::cuda::OptimizerPrecision precision_;
  bool int8_state_;  // optimizer.state: int8
  Recipe::Optimizer options_;
  uint64_t seed_;
  double router_bias_rate_;                        // 0: the correction biases stay as loaded
  std::vector<std::vector<double>> pending_load_;  // per MoE layer, since the last optimizer step
  std::unique_ptr<cuda::BucketedReduction> reduction_;  // several ranks only
  std::unique_ptr<cuda::UpdateInBackward> update_;       // optimizer.update_in_backward only
  std::unique_ptr<cuda::OverlappedGradNorm> norm_in_backward_;  // one rank, clipping, optimizer.norm_in_backward on
  // One rank, clipping after the backward pass, optimizer.norm_from_expert_gemms on.
  std::unique_ptr<model::cuda::ExpertNormPartials> expert_norms_;
  std::unique_ptr<ops::cuda::AdamWLazyRows> lazy_;       // optimizer.lazy_embedding: the embedding's slot
  int64_t micro_batches_ = 1, micro_batch_ = 0;           // of the current step
  FlatBuffers exp_avg_, exp_avg_sq_, master_, exp_avg_absmax_, exp_avg_sq_absmax_;
  std::vector<ops::cuda::AdamWSlot> slots_;
  std::vector<std::string> slot_names_;  // the training state's names: parameters, or "zero.<run>" shards
  Tensor norm_squared_, coefficient_;
  int64_t steps_ = 0;
  cuda::QueuedReadings readings_;  // the trainer's queued steps
};

}  // namespace

std::unique_ptr<TrainingEngine> make_gpu_engine(const Recipe& recipe, std::shared_ptr<const parallel::ParallelGroups> groups) {
  if (cuda_device_count() == 0) fail("training.device 'cuda': {}", cuda_unavailable_reason());
  const model::ModelSpec spec = model::load_model_spec(std::filesystem::path(recipe.model) / "config.json");
  model::require_gpu_support(spec);  // before loading
  // GPT-OSS's expert biases are not sharded with the experts: expert parallelism would need that first.
  for (const model::LayerSpec& layer : spec.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers)
      if (const model::MoeSpec* moe = sublayer.moe(); moe && moe->experts.bias && recipe.parallel.expert > 1)
        fail("{}: expert parallelism (parallel.expert {}) is not implemented on the GPU for experts with biases; "
             "set parallel.expert 1 (data parallelism still applies)",
             spec.architecture, recipe.parallel.expert);
  if (!groups) groups = std::make_shared<parallel::ParallelGroups>(parallel::make_groups(parallel::single_process_communicator(), 1, 0));
  return std::make_unique<GpuEngine>(recipe, std::move(groups));
}

}  // namespace moetune::train
