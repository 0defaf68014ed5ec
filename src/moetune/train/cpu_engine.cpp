// The CPU engine (fp32 reference) and the choice between engines.
#include <cmath>

#include "moetune/train/adamw.h"
#include "moetune/train/engine.h"
#include "moetune/train/grad_clip.h"

namespace moetune::train {
namespace {

// A tensor of a saved training state, which must have `like`'s shape and dtype: a checkpoint of another model
// (or an edited one) is refused by name, not copied because its element count happens to match.
Tensor state_tensor(const io::SafetensorsFile& file, const std::string& name, const Tensor& like) {
  if (!file.contains(name)) fail("no tensor '{}' (a checkpoint of another model?)", name);
  Tensor tensor = file.tensor(name);
  if (tensor.shape() != like.shape() || tensor.dtype() != like.dtype())
    fail("'{}' is {} {}, but the model's is {} {} (a checkpoint of another model?)", name, dtype_name(tensor.dtype()),
         shape_str(tensor.shape()), dtype_name(like.dtype()), shape_str(like.shape()));
  return tensor;
}

class CpuEngine final : public TrainingEngine {
 public:
  explicit CpuEngine(const Recipe& r)
      : model_(model::CausalLM::from_pretrained(r.model)),
        optimizer_(model_.parameters().values(), model_.parameters().grads(),
                   AdamWOptions{r.optimizer.lr, r.optimizer.beta1, r.optimizer.beta2, r.optimizer.eps, r.optimizer.weight_decay}) {
    if (r.optimizer.precision != "fp32")
      fail("optimizer.precision '{}' needs the GPU engine; the CPU engine trains in fp32", r.optimizer.precision);
  }
  const model::ModelSpec& spec() const override { return model_.spec(); }
  Device device() const override { return Device::cpu(); }

  model::CausalLMOutput forward_backward(const model::Batch& batch) override { return model_.forward_backward(batch); }
  model::CausalLMOutput evaluate(const model::Batch& batch) override { return model_.loss(batch); }
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override { return model_.router_stats(); }

  double optimizer_step(double lr, double max_grad_norm) override {
    const double norm = global_grad_norm(model_.parameters().grads());
    if (std::isfinite(norm)) {  // a NaN/Inf gradient would spoil every weight and moment it touches
      if (max_grad_norm > 0) clip_grad_norm(model_.parameters().grads(), max_grad_norm);
      optimizer_.step(lr);
    }
    model_.zero_grad();
    return norm;
  }
  int64_t optimizer_steps() const override { return optimizer_.steps_taken(); }
  void save_pretrained(const std::filesystem::path& folder) const override { model_.save_pretrained(folder); }

  io::NamedTensors training_state() const override {
    const auto& specs = model_.weights().layout.parameters;
    io::NamedTensors state;
    for (size_t i = 0; i < specs.size(); ++i) {
      state.emplace_back("param." + specs[i].name, model_.weights().parameters[i]);
      if (!specs[i].trainable) continue;  // frozen: no optimizer state
      state.emplace_back("adam_m." + specs[i].name, optimizer_.first_moments()[i]);
      state.emplace_back("adam_v." + specs[i].name, optimizer_.second_moments()[i]);
    }
    return state;
  }
  void restore_training_state(const io::SafetensorsFile& file, int64_t optimizer_steps) override {
    const auto& specs = model_.weights().layout.parameters;
    std::vector<Tensor> m, v;
    for (size_t i = 0; i < specs.size(); ++i) {
      Tensor& parameter = model_.parameters().values()[i];
      parameter.copy_from(state_tensor(file, "param." + specs[i].name, parameter));
      m.push_back(specs[i].trainable ? state_tensor(file, "adam_m." + specs[i].name, parameter) : Tensor());
      v.push_back(specs[i].trainable ? state_tensor(file, "adam_v." + specs[i].name, parameter) : Tensor());
    }
    optimizer_.restore(m, v, optimizer_steps);
  }

 private:
  model::CausalLM model_;
  AdamW optimizer_;
};

}  // namespace

std::unique_ptr<TrainingEngine> make_cpu_engine(const Recipe& recipe) { return std::make_unique<CpuEngine>(recipe); }

std::unique_ptr<TrainingEngine> make_engine(const Recipe& recipe) {
  const std::string& device = recipe.training.device;
  if (device == "cuda") return make_gpu_engine(recipe);
  if (device == "auto" && cuda_device_count() > 0) return make_gpu_engine(recipe);
  return make_cpu_engine(recipe);
}

#if !MOETUNE_HAVE_CUDA
std::unique_ptr<TrainingEngine> make_gpu_engine(const Recipe&) {
  fail("training.device 'cuda': {}", cuda_unavailable_reason());
}
#endif

}  // namespace moetune::train
