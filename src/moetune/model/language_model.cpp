#include "moetune/model/language_model.h"

#include "moetune/core/device.h"
#include "moetune/model/causal_lm.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#if MOETUNE_HAVE_CUDA
#include "moetune/model/cuda/causal_lm.h"
#endif

namespace moetune::model {

std::unique_ptr<LanguageModel> load_language_model(const std::filesystem::path& folder, const std::string& device,
                                                   const LoadOptions& options) {
  if (device != "auto" && device != "cpu" && device != "cuda") fail("device '{}': expected auto, cpu or cuda", device);
  const bool gpu = device == "cuda" || (device == "auto" && cuda_device_count() > 0);
  if (!gpu) {
    LoadOptions cpu = options;
    cpu.dtype = DType::F32;
    cpu.device = Device::cpu();
    return std::make_unique<CausalLM>(CausalLM::from_weights(load_checkpoint(folder, cpu)));
  }
#if MOETUNE_HAVE_CUDA
  if (cuda_device_count() == 0) fail("device 'cuda': {}", cuda_unavailable_reason());
  // Before the weights go to the GPU: what the GPU engine runs (generation checks its decode path itself).
  require_gpu_support(load_model_spec(folder / "config.json"));
  LoadOptions bf16 = options;
  bf16.dtype = DType::BF16;
  bf16.device = Device::cuda();
  return std::make_unique<cuda::CausalLM>(cuda::CausalLM::from_weights(load_checkpoint(folder, bf16)));
#else
  fail("device 'cuda': {}", cuda_unavailable_reason());
#endif
}

}  // namespace moetune::model
