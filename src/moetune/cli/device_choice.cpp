#include "moetune/cli/device_choice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "moetune/core/device.h"
#include "moetune/core/error.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"

namespace moetune::cli {

std::string choose_device(const std::filesystem::path& model_folder, const std::string& device, ModelUse use) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("--device '{}': expected auto, cpu or cuda", device);
  if (device == "cpu" || (device == "auto" && cuda_device_count() == 0)) return "cpu";
  const model::ModelSpec spec = model::load_model_spec(model_folder / "config.json");
  const bool generates = use == ModelUse::Generation;
  if (device == "cuda") {
    generates ? model::require_gpu_generation_support(spec) : model::require_gpu_support(spec);
    return device;
  }
  const std::vector<std::string> missing =
      generates ? model::features_missing_for_gpu_generation(spec) : model::features_missing_on_gpu(spec);
  if (missing.empty()) return "cuda";
  std::fprintf(stderr, "moetune: %s does not run %s's %s yet, so this runs on the CPU (fp32)\n",
               generates ? "GPU generation" : "the GPU engine", spec.architecture.c_str(),
               fmt::format("{}", fmt::join(missing, ", ")).c_str());
  return "cpu";
}

}  // namespace moetune::cli
