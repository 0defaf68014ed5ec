// Hugging Face model folders in and out of the engine's parameter set, through the family's parameter
// layout (model/parameter_layout.h). Loading checks the folder against config.json: every tensor the
// architecture needs is there with the shape the config implies, and nothing else is. Saving writes the HF
// names, the per-expert layout and each tensor's dtype as it was on disk, so load -> save is bit-exact.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "moetune/io/safetensors_folder.h"
#include "moetune/model/parameter_layout.h"
#include "moetune/io/safetensors.h"

namespace moetune::model {

struct LoadOptions {
  std::optional<DType> dtype;  // the engine's dtype for every parameter; nullopt keeps the checkpoint's
  Device device = Device::cpu();
  // Engine-name patterns ('*' matches anything) of parameters to freeze: no gradient, no optimizer state.
  std::vector<std::string> frozen;
};

// The parameters live in one flat buffer per dtype (core/flat_buffers.h); `parameters` are views into it.
struct ModelWeights {
  ParameterLayout layout;
  std::vector<Tensor> parameters;            // parallel to layout.parameters
  std::vector<DType> disk_dtypes;            // parallel too: the dtype to write back
  std::vector<bool> stored_fused;            // parallel too: written as one v5 fused tensor, not per piece
  std::filesystem::path source;              // the folder it was loaded from, if any

  const ModelSpec& spec() const { return layout.spec; }
  const Tensor& parameter(const std::string& name) const;  // fails naming the parameter when absent
  const Tensor* find(const std::string& name) const;       // null when absent (optional biases, lm_head)
};

// Checks a folder's tensors (names, shapes; no bytes read) against what the layout needs; errors name the
// file and tensor at fault. Returns, per parameter, whether the folder holds it as one v5 fused tensor.
std::vector<bool> match_checkpoint(const ParameterLayout& layout, const io::SafetensorsFolder& files);

// Marks every parameter whose engine name matches one of `patterns` as not trainable; a pattern that matches
// nothing is an error naming it.
void freeze_parameters(ParameterLayout& layout, const std::vector<std::string>& patterns);
bool name_matches(const std::string& pattern, const std::string& name);

ModelWeights load_checkpoint(const std::filesystem::path& folder, const LoadOptions& options = {});

// Writes config.json (as it was read), the weights (sharded at options.max_shard_bytes) and, when the weights
// came from another folder, that folder's tokenizer and generation files.
void save_checkpoint(const ModelWeights& weights, const std::filesystem::path& folder, const io::SaveOptions& options = {});

// The HF tensors of `weights` as they would be saved: names, per-expert layout, disk dtypes.
io::NamedTensors to_hf_tensors(const ModelWeights& weights);

}  // namespace moetune::model
