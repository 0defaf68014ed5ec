// The CPU engine (fp32 reference) and the choice between engines.
#include <cmath>

#include "moetune/model/all_to_all_dispatcher.h"
#include "moetune/model/lora_weights.h"
#include "moetune/train/adamw.h"
#include "moetune/train/sharded_adamw.h"
#include "moetune/train/engine.h"
#include "moetune/train/grad_clip.h"
#include "moetune/train/parallel_save.h"

namespace moetune::train {
namespace {

// A tensor of a saved training state, which must have `like`'s shape and dtype: a checkpoint of another model
// (or an edited one) is refused by name, not copied because its element count happens to match.
Tensor state_tensor(const io::SafetensorsFile& file, const std::string& name, const Tensor& like) {
  if (!file.contains(name))
    fail("no tensor '{}' (a checkpoint of another model, or saved with another optimizer.state?)", name);
  Tensor tensor = file.tensor(name);
  if (tensor.shape() != like.shape() || tensor.dtype() != like.dtype())
    fail("'{}' is {} {}, but the model's is {} {} (a checkpoint of another model, or saved with another "
         "optimizer.state?)",
         name, dtype_name(tensor.dtype()), shape_str(tensor.shape()), dtype_name(like.dtype()), shape_str(like.shape()));
  return tensor;
}

class CpuEngine final : public TrainingEngine {
 public:
  CpuEngine(const Recipe& r, std::shared_ptr<const parallel::ParallelGroups> groups)
      : router_bias_rate_(r.training.router_bias_update_rate),
        groups_(std::move(groups)),
        model_(model::CausalLM::from_weights(load_for_training(r, groups_->layout, DType::F32, Device::cpu()), dispatcher_factory())) {
    if (r.optimizer.precision != "fp32")
      fail("optimizer.precision '{}' needs the GPU engine; the CPU engine trains in fp32", r.optimizer.precision);
    const AdamWOptions options{r.optimizer.lr,  r.optimizer.beta1,        r.optimizer.beta2,
                               r.optimizer.eps, r.optimizer.weight_decay, r.optimizer.state == "int8"};
    if (router_bias_rate_ > 0) require_correction_biases();
    if (!parallel()) {
      optimizer_ = std::make_unique<AdamW>(model_.parameters().values(), model_.parameters().grads(), options);
      return;
    }
    for (const model::ParameterSpec& p : model_.weights().layout.parameters)
      if (!p.trainable) fail("'{}' is frozen: frozen parameters are not yet supported with several ranks", p.name);
    // One ZeRO run per placement: the dense parameters over the world, the experts over their replicas.
    std::vector<ShardedRun> runs;
    const auto add = [&](const char* name, const std::vector<Tensor>& values, const std::vector<Tensor>& grads,
                         std::shared_ptr<parallel::Communicator> group) {
      MOETUNE_CHECK(values.size() == grads.size() && values.size() <= 1, "ZeRO run '{}': {} parameter runs", name, values.size());
      if (!values.empty()) runs.push_back({name, values[0], grads[0], std::move(group)});
    };
    add("replicated", model_.weights().replicated_runs.buffers, model_.parameters().replicated_grad_runs(), groups_->world);
    add("experts", model_.weights().expert_runs.buffers, model_.parameters().expert_grad_runs(), groups_->expert_replicas);
    sharded_ = std::make_unique<ShardedAdamW>(std::move(runs), groups_->world, options);
  }
  const model::ModelSpec& spec() const override { return model_.spec(); }
  Device device() const override { return Device::cpu(); }

  // LoRA dropout's masks follow the step (and the micro-batch within it), so a resumed run draws the same ones.
  void begin_step(int64_t, double) override { model_.set_lora_draw(uint64_t(optimizer_steps()) << 20); }
  model::CausalLMOutput forward_backward(const model::Batch& batch) override { return model_.forward_backward(batch); }
  model::CausalLMOutput evaluate(const model::Batch& batch) override { return model_.loss(batch); }
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override { return model_.router_stats(); }

  double optimizer_step(double lr, double max_grad_norm) override {
    double norm = 0;
    if (sharded_) {
      norm = sharded_->step(lr, max_grad_norm);
    } else {
      norm = global_grad_norm(model_.parameters().grads());
      if (std::isfinite(norm)) {  // a NaN/Inf gradient would spoil every weight and moment it touches
        if (max_grad_norm > 0) scale_to_max_norm(model_.parameters().grads(), norm, max_grad_norm);
        optimizer_->step(lr);
        if (router_bias_rate_ > 0) model_.update_router_bias(router_bias_rate_);
      }
    }
    model_.zero_grad();
    return norm;
  }
  int64_t optimizer_steps() const override { return sharded_ ? sharded_->steps_taken() : optimizer_->steps_taken(); }

  void save_pretrained(const std::filesystem::path& folder) const override {
    if (model_.weights().lora) return model::save_adapter(model_.weights(), folder);  // one rank: the adapter alone
    save_on_ranks(model_.weights(), groups_->layout, folder, [&] { model_.save_pretrained(folder); });
  }

  io::NamedTensors training_state() const override {
    if (sharded_) return sharded_->state();
    const auto& specs = model_.weights().layout.parameters;
    io::NamedTensors state;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!specs[i].trainable) continue;  // frozen: unchanged since loading, and no optimizer state
      state.emplace_back("param." + specs[i].name, model_.weights().parameters[i]);
      for (const auto& [prefix, tensors] : optimizer_->named_state()) state.emplace_back(prefix + "." + specs[i].name, tensors[i]);
    }
    return state;
  }
  void restore_training_state(const io::SafetensorsFile& file, int64_t optimizer_steps) override {
    if (sharded_) return sharded_->restore(file, optimizer_steps);
    const auto& specs = model_.weights().layout.parameters;
    const auto targets = optimizer_->named_state();
    std::vector<std::vector<Tensor>> saved(targets.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      Tensor& parameter = model_.parameters().values()[i];
      if (specs[i].trainable) parameter.copy_from(state_tensor(file, "param." + specs[i].name, parameter));
      for (size_t k = 0; k < targets.size(); ++k) {
        const auto& [prefix, tensors] = targets[k];
        saved[k].push_back(specs[i].trainable ? state_tensor(file, prefix + "." + specs[i].name, tensors[i]) : Tensor());
      }
    }
    optimizer_->restore(saved, optimizer_steps);
  }
  void finish_restore() override {
    if (sharded_) sharded_->gather_parameters();
  }

 private:
  bool parallel() const { return groups_->layout.world > 1; }
  // training.router_bias_update_rate needs routers with a correction bias (DeepSeek-V3) and one rank.
  void require_correction_biases() const {
    if (parallel()) fail("training.router_bias_update_rate is not yet supported with several ranks");
    for (const model::ParameterSpec& p : model_.weights().layout.parameters)
      if (p.name.ends_with("moe.router_correction_bias")) return;
    fail("training.router_bias_update_rate is {}, but the routers of this {} have no correction bias "
         "(e_score_correction_bias) to move",
         router_bias_rate_, model_.spec().architecture);
  }

  model::DispatcherFactory<model::CpuBlocks> dispatcher_factory() const {
    if (groups_->layout.expert == 1) return {};
    return [group = groups_->expert_parallel](int64_t experts) {
      return std::make_unique<model::AllToAllDispatcher>(experts, group);
    };
  }

  double router_bias_rate_;                  // 0: the correction biases stay as loaded
  std::shared_ptr<const parallel::ParallelGroups> groups_;
  model::CausalLM model_;
  std::unique_ptr<AdamW> optimizer_;         // one rank
  std::unique_ptr<ShardedAdamW> sharded_;    // several: ZeRO-2
};

}  // namespace

std::unique_ptr<TrainingEngine> make_cpu_engine(const Recipe& recipe, std::shared_ptr<const parallel::ParallelGroups> groups) {
  if (!groups) groups = std::make_shared<parallel::ParallelGroups>(parallel::make_groups(parallel::single_process_communicator(), 1, 0));
  return std::make_unique<CpuEngine>(recipe, std::move(groups));
}

bool uses_gpu_engine(const Recipe& recipe) {
  const std::string& device = recipe.training.device;
  return device == "cuda" || (device == "auto" && cuda_device_count() > 0);
}

std::unique_ptr<TrainingEngine> make_engine(const Recipe& recipe, std::shared_ptr<const parallel::ParallelGroups> groups) {
  if (!uses_gpu_engine(recipe)) {
    // The CPU engine is the fp32 reference, where memory is rarely the limit; its MoE aux-loss gradient and
    // LoRA dropout's draw count are not set up for a second forward pass.
    if (recipe.training.recompute != "none")
      fail("training.recompute '{}' runs on the GPU engine; the CPU engine keeps every activation (set it to none)",
           recipe.training.recompute);
    return make_cpu_engine(recipe, std::move(groups));
  }
  return make_gpu_engine(recipe, std::move(groups));
}

std::optional<model::LoraConfig> lora_settings(const Recipe& recipe) {
  if (recipe.lora.adapter.empty()) return recipe.lora.settings.enabled() ? std::optional(recipe.lora.settings) : std::nullopt;
  model::LoraConfig adapter = model::read_adapter_config(recipe.lora.adapter);
  if (recipe.lora.settings.enabled() && recipe.lora.settings.rank != adapter.rank)
    fail("lora.rank is {} but the adapter '{}' has rank {} (leave lora.rank at 0 to take the adapter's)", recipe.lora.settings.rank,
         recipe.lora.adapter, adapter.rank);
  adapter.seed = recipe.lora.settings.seed;
  return adapter;
}

model::LoadOptions load_options(const parallel::ParallelLayout& layout, DType dtype, Device device) {
  return {dtype, device, {}, {layout.expert_rank(), layout.expert}, {layout.world, layout.expert_replicas()}};
}

#if !MOETUNE_HAVE_CUDA
std::unique_ptr<TrainingEngine> make_gpu_engine(const Recipe&, std::shared_ptr<const parallel::ParallelGroups>) {
  fail("training.device 'cuda': {}", cuda_unavailable_reason());
}
#endif

}  // namespace moetune::train
