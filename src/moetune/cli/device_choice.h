// What `--device auto` means for a command that loads a model: the GPU when one is visible and it runs what the
// command needs of this model, else the CPU, said on stderr. eval scores with the GPU engine's forward pass (what
// training runs); generate needs the GPU's decode path too, which implements less (model/device_support.h).
#pragma once

#include <filesystem>
#include <string>

namespace moetune::cli {

enum class ModelUse { Scoring, Generation };

// "cpu", "cuda" or "auto" -> the device to load on. An explicit "cuda" is checked here, before anything loads, so
// the user learns what is missing on the GPU and not only that no GPU is there.
std::string choose_device(const std::filesystem::path& model_folder, const std::string& device, ModelUse use);

}  // namespace moetune::cli
