// Hugging Face model folders in and out of the engine's parameter set, through the family's parameter
// layout (model/parameter_layout.h). Loading checks the folder against config.json: every tensor the
// architecture needs is there with the shape the config implies, and nothing else is. Saving writes the HF
// names, the per-expert layout and each tensor's dtype as it was on disk, so load -> save is bit-exact.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moetune/io/safetensors_folder.h"
#include "moetune/model/expert_shard.h"
#include "moetune/model/parameter_layout.h"
#include "moetune/model/placed_buffers.h"
#include "moetune/io/safetensors.h"

namespace moetune::model {

struct LoraConfig;

struct LoadOptions {
  std::optional<DType> dtype;  // the engine's dtype for every parameter; nullopt keeps the checkpoint's
  Device device = Device::cpu();
  // Engine-name patterns ('*' matches anything) of parameters to freeze: no gradient, no optimizer state.
  std::vector<std::string> frozen;
  // Expert parallelism: load only this share of the experts (the other ranks' bytes are never read).
  ExpertShard experts;
  // ZeRO: how many ranks each flat run of parameters (and the gradients made like them) is split over.
  ShardCounts shards;
  // QLoRA on the GPU (model/cuda/nf4_base.h): the parameters `held_elsewhere` selects are read on the host in
  // their checkpoint's precision (bf16 or f32; f32 for any other dtype), not `dtype`, and handed to `take` (their
  // index, the host tensor: maybe a view of the file's mapped pages, valid during the call) instead of being
  // placed; their views in ModelWeights::parameters stay undefined until the taker fills them.
  std::function<bool(const ParameterSpec&)> held_elsewhere;
  std::function<void(size_t index, const Tensor& host)> take;
};

// The parameters live in flat runs by placement and dtype (model/placed_buffers.h); `parameters` are views
// into them.
struct ModelWeights {
  ParameterLayout layout;  // sharded: the expert parameters hold this rank's share
  ExpertShard experts;
  ShardCounts shards;
  FlatBuffers replicated_runs, expert_runs;
  std::vector<Tensor> parameters;            // parallel to layout.parameters
  std::vector<DType> disk_dtypes;            // parallel too: the dtype to write back
  std::vector<bool> stored_fused;            // parallel too: written as one v5 fused tensor, not per piece
  std::filesystem::path source;              // the folder it was loaded from, if any
  // The tensors ModelSpec::CheckpointNames::carried selects (a vision-language model's vision tower), as the
  // folder holds them (views of its mapped pages): never run or trained, saved back unchanged.
  io::NamedTensors carried;
  // Set by attach_lora (model/lora_weights.h): the adapters' settings; their A and B are parameters too.
  std::shared_ptr<const LoraConfig> lora;

  const ModelSpec& spec() const { return layout.spec; }
  const Tensor& parameter(const std::string& name) const;  // fails naming the parameter when absent
  const Tensor* find(const std::string& name) const;       // null when absent (optional biases, lm_head)
};

// Whether the checkpoint tensor `name` is one ModelSpec::CheckpointNames::carried passes through.
bool is_carried_tensor(const ModelSpec& spec, const std::string& name);

// Checks a folder's tensors (names, shapes; no bytes read) against what the layout needs; errors name the
// file and tensor at fault. Returns, per parameter, whether the folder holds it as one v5 fused tensor.
std::vector<bool> match_checkpoint(const ParameterLayout& layout, const io::SafetensorsFolder& files);

// The model description of the folder's config.json as its weight files make it: transformers' tie_weights
// leaves a tied config untied (with a warning) when the files hold an lm_head.weight whose values differ from
// the embedding's, and trains both; so does moetune (config.json is saved back unchanged, so transformers unties
// the saved folder the same way). Said on stderr.
ModelSpec load_model_spec_for(const std::filesystem::path& folder);

// Marks every parameter whose engine name matches one of `patterns` as not trainable; a pattern that matches
// nothing is an error naming it.
void freeze_parameters(ParameterLayout& layout, const std::vector<std::string>& patterns);
bool name_matches(const std::string& pattern, const std::string& name);

ModelWeights load_checkpoint(const std::filesystem::path& folder, const LoadOptions& options = {});

// Writes config.json (as it was read), the weights (sharded at options.max_shard_bytes) and, when the weights
// came from another folder, that folder's tokenizer and generation files.
void save_checkpoint(const ModelWeights& weights, const std::filesystem::path& folder, const io::SaveOptions& options = {});

// The HF tensors of `weights` as they would be saved: names, per-expert layout, disk dtypes.
enum class TensorSelection { All, ExpertsOnly };
io::NamedTensors to_hf_tensors(const ModelWeights& weights, TensorSelection selection = TensorSelection::All);

// config.json (as it was read) and, when the weights came from another folder, its tokenizer and generation files.
void save_model_files(const ModelWeights& weights, const std::filesystem::path& folder);

}  // namespace moetune::model
