// The GPU engine: the bf16 model on one GPU, gradient clipping and AdamW without a host round trip (the clip
// coefficient stays on the device), in the precision the recipe names.
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/flat_buffers.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/grad_norm.h"
#include "moetune/train/engine.h"

namespace moetune::train {
namespace {

class GpuEngine final : public TrainingEngine {
 public:
  explicit GpuEngine(const Recipe& r)
      : model_(model::cuda::CausalLM::from_pretrained(r.model)),
        precision_(ops::cuda::parse_optimizer_precision(r.optimizer.precision)),
        options_(r.optimizer),
        seed_(uint64_t(r.training.seed)) {
    const DType moment_dtype = precision_ == ops::cuda::OptimizerPrecision::Fp32Master ? DType::F32 : DType::BF16;
    const bool master = precision_ == ops::cuda::OptimizerPrecision::Fp32Master;
    auto& values = model_.parameters().values();
    auto& grads = model_.parameters().grads();
    // AdamW's moments (and fp32 master weights) in flat buffers, one view per trainable parameter.
    std::vector<FlatRequest> moments, masters;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!grads[i].defined())
        fail("parameter '{}' is frozen; the GPU engine trains every parameter so far (freezing runs on the CPU engine)",
             model_.weights().layout.parameters[i].name);
      moments.push_back({values[i].shape(), moment_dtype});
      masters.push_back({values[i].shape(), DType::F32, master});
    }
    exp_avg_ = allocate_flat(moments, Device::cuda(), /*zeroed=*/true);
    exp_avg_sq_ = allocate_flat(moments, Device::cuda(), /*zeroed=*/true);
    master_ = allocate_flat(masters, Device::cuda(), /*zeroed=*/false);
    for (size_t i = 0; i < values.size(); ++i) {
      ops::cuda::AdamWSlot slot{values[i], grads[i], exp_avg_.views[i], exp_avg_sq_.views[i], master_.views[i]};
      // The checkpoint's own values would be more exact than their bf16 copy; the bf16 model is what we hold.
      if (master) ops::cast_into(values[i], slot.master);
      slots_.push_back(std::move(slot));
    }
    norm_squared_ = Tensor::empty({1}, DType::F32, Device::cuda());
    coefficient_ = Tensor::empty({1}, DType::F32, Device::cuda());
  }

  const model::ModelSpec& spec() const override { return model_.spec(); }
  Device device() const override { return Device::cuda(); }
  model::CausalLMOutput forward_backward(const model::Batch& batch) override { return model_.forward_backward(batch); }
  model::CausalLMOutput evaluate(const model::Batch& batch) override { return model_.loss(batch); }
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override { return model_.router_stats(); }

  double optimizer_step(double lr, double max_grad_norm) override {
    ops::cuda::grad_norm_squared(model_.parameters().grads(), norm_squared_);
    Tensor scale;
    if (max_grad_norm > 0) {
      ops::cuda::clip_coefficient(norm_squared_, max_grad_norm, coefficient_);
      scale = coefficient_;
    }
    ++steps_;
    ops::cuda::adamw_step(slots_, {lr, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, steps_},
                          precision_, scale, seed_);
    model_.zero_grad();
    const Tensor host = norm_squared_.to(Device::cpu());  // waits for the step
    return std::sqrt(double(host.data<float>()[0]));
  }
  int64_t optimizer_steps() const override { return steps_; }
  void save_pretrained(const std::filesystem::path& folder) const override { model_.save_pretrained(folder); }

  io::NamedTensors training_state() const override {
    const auto& specs = model_.weights().layout.parameters;
    io::NamedTensors state;
    for (size_t i = 0; i < specs.size(); ++i) {
      state.emplace_back("param." + specs[i].name, slots_[i].param.to(Device::cpu()));
      state.emplace_back("adam_m." + specs[i].name, slots_[i].exp_avg.to(Device::cpu()));
      state.emplace_back("adam_v." + specs[i].name, slots_[i].exp_avg_sq.to(Device::cpu()));
      if (slots_[i].master.defined()) state.emplace_back("master." + specs[i].name, slots_[i].master.to(Device::cpu()));
    }
    return state;
  }
  void restore_training_state(const io::SafetensorsFile& file, int64_t optimizer_steps) override {
    const auto& specs = model_.weights().layout.parameters;
    for (size_t i = 0; i < specs.size(); ++i) {
      restore(slots_[i].param, file, "param." + specs[i].name);
      restore(slots_[i].exp_avg, file, "adam_m." + specs[i].name);
      restore(slots_[i].exp_avg_sq, file, "adam_v." + specs[i].name);
      if (slots_[i].master.defined()) restore(slots_[i].master, file, "master." + specs[i].name);
    }
    steps_ = optimizer_steps;
  }

  nlohmann::json memory_metrics() const override {
    const gpu::MemoryStats stats = gpu::memory_stats();
    return {{"gpu_peak_bytes", stats.peak_in_use}, {"gpu_reserved_peak_bytes", stats.peak_reserved},
            {"gpu_device_used_bytes", gpu::device_used_bytes()}};
  }

 private:
  // A checkpoint of another precision mode converts (an fp32 CPU checkpoint resumed on the GPU, say).
  static void restore(Tensor target, const io::SafetensorsFile& file, const std::string& name) {
    const Tensor saved = file.tensor(name);
    MOETUNE_CHECK(saved.shape() == target.shape(), "{}: '{}' is {} in the checkpoint but {} in the model",
                  "training_state.safetensors", name, saved.str(), target.str());
    const Tensor converted = saved.dtype() == target.dtype() ? saved : ops::cast(saved, target.dtype());
    target.copy_from(converted);
  }

  model::cuda::CausalLM model_;
  ops::cuda::OptimizerPrecision precision_;
  Recipe::Optimizer options_;
  uint64_t seed_;
  FlatBuffers exp_avg_, exp_avg_sq_, master_;
  std::vector<ops::cuda::AdamWSlot> slots_;
  Tensor norm_squared_, coefficient_;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainingEngine> make_gpu_engine(const Recipe& recipe) {
  if (cuda_device_count() == 0) fail("training.device 'cuda': {}", cuda_unavailable_reason());
  return std::make_unique<GpuEngine>(recipe);
}

}  // namespace moetune::train
