#include "moetune/model/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "moetune/core/flat_buffers.h"
#include "moetune/io/atomic_file.h"
#include "moetune/model/families/text_of_multimodal.h"
#include "moetune/model/fp8_dequantize.h"
#include "moetune/model/model_description.h"
#include "moetune/model/mxfp4.h"
#include "moetune/model/piece_transform.h"
#include "moetune/ops/cast.h"

namespace moetune::model {

using io::SafetensorsFolder;
using io::NamedTensors;

namespace fs = std::filesystem;

namespace {

// Files beside the weights that belong to the model and travel with it.
constexpr const char* kCompanionFiles[] = {
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja",    "vocab.json",     "merges.txt",            "added_tokens.json",
    "tokenizer.model",        "chat_template.json",
};

// Buffers that older checkpoints carry and transformers ignores on load.
bool is_ignored_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// <decoder>layers.K.* (model.layers.K.*; Nemotron-H: backbone.layers.K.*) with K >= num_hidden_layers: a layer
// config.json does not describe (DeepSeek-V3's multi-token-prediction module, or a checkpoint whose config was cut to
// fewer layers). transformers leaves such tensors unloaded (with its "weights ... were not used" warning); so does
// moetune, and it does not save them.
bool is_layer_past_last(const ModelSpec& config, const std::string& name) {
  const int64_t num_layers = config.num_layers();
  const std::string prefix = config.checkpoint_names.decoder + "layers.";
  if (!name.starts_with(prefix)) return false;
  const size_t end = name.find('.', prefix.size());
  const std::string index = name.substr(prefix.size(), end == std::string::npos ? std::string::npos : end - prefix.size());
  if (index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoll(index) >= num_layers;
}

std::string head_name(const ModelSpec& config) { return config.checkpoint_names.head + "weight"; }
std::string embedding_name(const ModelSpec& config) { return config.checkpoint_names.decoder + "embed_tokens.weight"; }

// lm_head.weight holds the embedding's values (in its dtype or another): a tied model's copy of its head.
bool head_is_the_embedding(const ModelSpec& config, const SafetensorsFolder& files) {
  const std::string head = head_name(config), embedding = embedding_name(config);
  if (!files.contains(head) || !files.contains(embedding)) return false;
  if (files.entry(head).shape != files.entry(embedding).shape) return false;
  const Tensor a = files.tensor(head), b = files.tensor(embedding);
  return a.dtype() == b.dtype() ? a.same_bytes(b) : ops::cast(a, DType::F32).same_bytes(ops::cast(b, DType::F32));
}

std::string where(const SafetensorsFolder& folder, const std::string& name) {
  return folder.file_of(name).path().string();
}

void check_shape(const SafetensorsFolder& folder, const std::string& name, const Shape& expected) {
  const Shape& actual = folder.entry(name).shape;
  if (actual != expected)
    fail("{}: tensor '{}' has shape {} but config.json implies {}", where(folder, name), name, shape_str(actual),
         shape_str(expected));
}

}  // namespace

bool is_carried_tensor(const ModelSpec& spec, const std::string& name) {
  const std::vector<std::string>& prefixes = spec.checkpoint_names.carried;
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& prefix) { return name.starts_with(prefix); });
}

const Tensor* ModelWeights::find(const std::string& name) const {
  for (size_t i = 0; i < parameters.size(); ++i)
    if (layout.parameters[i].name == name) return &parameters[i];
  return nullptr;
}

const Tensor& ModelWeights::parameter(const std::string& name) const {
  const Tensor* found = find(name);
  if (!found) fail("no parameter '{}' in this {} model", name, layout.spec.architecture);
  return *found;
}

std::vector<bool> match_checkpoint(const ParameterLayout& layout, const SafetensorsFolder& files) {
  const ModelSpec& config = layout.spec;
  std::vector<bool> stored_fused;
  std::set<std::string> claimed;
  std::vector<std::string> missing;
  for (const auto& spec : layout.parameters) {
    bool fused = !spec.fused_hf_name.empty() && files.contains(spec.fused_hf_name);
    stored_fused.push_back(fused);
    if (fused) {
      check_shape(files, spec.fused_hf_name, spec.shape);
      claimed.insert(spec.fused_hf_name);
      continue;
    }
    for (const auto& piece : spec.pieces) {
      if (holds_mxfp4(files, piece.name)) {  // gpt-oss's released experts: dequantized on load
        if (const Shape shape = mxfp4_tensor_shape(files, piece.name); shape != piece.shape)
          fail("{}: MXFP4 tensor '{}_blocks' dequantizes to shape {} but config.json implies {}",
               where(files, piece.name + "_blocks"), piece.name, shape_str(shape), shape_str(piece.shape));
        claimed.insert({piece.name + "_blocks", piece.name + "_scales"});
        continue;
      }
      if (!files.contains(piece.name)) {
        missing.push_back(piece.name);
        continue;
      }
      check_shape(files, piece.name, piece.shape);
      claimed.insert(piece.name);
      if (is_fp8_block_scaled(files, piece.name)) claimed.insert(fp8_scale_name(piece.name));
    }
  }
  if (!missing.empty())
    fail("{}: {} tensor(s) that {} needs (per config.json) are missing, first '{}'", files.folder().string(),
         missing.size(), config.architecture, missing.front());

  int64_t layers_past_last = 0;
  for (const auto& name : files.names()) {
    if (claimed.count(name) || is_ignored_buffer(name) || is_carried_tensor(config, name)) continue;
    if (config.carries_mtp_layers && name.starts_with("mtp.")) continue;  // not saved either
    if (is_layer_past_last(config, name)) {                               // not saved either
      ++layers_past_last;
      continue;
    }
    // A tied model's head is its embedding; a copy of it on disk is harmless only if it is that copy.
    if (name == head_name(config) && config.tie_word_embeddings && head_is_the_embedding(config, files)) continue;
    fail("{}: unexpected tensor '{}' (not part of {} as config.json describes it)", where(files, name), name,
         config.architecture);
  }
  if (layers_past_last > 0)
    std::fprintf(stderr,
                 "%s: %lld tensor(s) of layers past config.json's num_hidden_layers (%lld) are not loaded, trained or "
                 "saved (transformers leaves them unused too)\n",
                 files.folder().string().c_str(), static_cast<long long>(layers_past_last),
                 static_cast<long long>(config.num_layers()));
  return stored_fused;
}

ModelSpec load_model_spec_for(const fs::path& folder) {
  ModelSpec spec = load_model_spec(folder / "config.json");
  const bool wrapped = !spec.checkpoint_names.carried.empty();
  if (!wrapped && !spec.tie_word_embeddings) return spec;
  if (wrapped && !SafetensorsFolder::holds_weights(folder)) return spec;  // config.json alone: the names it implies
  const SafetensorsFolder files = SafetensorsFolder::open(folder);
  if (wrapped) follow_checkpoint_spelling(spec, files);
  if (!spec.tie_word_embeddings) return spec;
  const std::string head = head_name(spec), embedding = embedding_name(spec);
  if (!files.contains(head) || head_is_the_embedding(spec, files)) return spec;
  if (!files.contains(embedding) || files.entry(head).shape != files.entry(embedding).shape)
    return spec;  // named later
  std::fprintf(stderr,
               "%s: tie_word_embeddings is true but %s differs from the embedding: trained untied, "
               "as transformers loads it (it warns the same)\n",
               folder.string().c_str(), head.c_str());
  spec.tie_word_embeddings = false;
  return spec;
}

ModelWeights load_checkpoint(const fs::path& folder, const LoadOptions& options) {
  ModelWeights weights;
  weights.source = folder;
  weights.layout = parameter_layout(load_model_spec_for(folder));
  SafetensorsFolder files = SafetensorsFolder::open(folder);
  freeze_parameters(weights.layout, options.frozen);
  // The whole model is checked (headers only), then this rank keeps its share of the experts.
  const std::vector<bool> whole_fused = match_checkpoint(weights.layout, files);
  const ParameterLayout whole = weights.layout;
  // FP8 block-scaled weights are dequantised as they are read and kept (and saved) as bf16.
  const std::optional<std::array<int64_t, 2>> fp8_block = fp8_block_size(weights.layout.spec);
  bool fp8_dequantized = false;
  auto stored_dtype = [&](const std::string& name) {
    if (!is_fp8_block_scaled(files, name)) return files.entry(name).dtype;
    if (!fp8_block) fail("{}: '{}' has FP8 block scales but config.json has no quantization_config", where(files, name), name);
    return DType::BF16;
  };
  shard_experts(weights.layout, options.experts);
  weights.experts = options.experts;
  weights.shards = options.shards;
  weights.stored_fused = whole_fused;
  for (size_t i = 0; i < whole_fused.size(); ++i)
    if (weights.layout.parameters[i].fused_hf_name.empty()) weights.stored_fused[i] = false;  // a share: per expert

  const auto held_elsewhere = [&](const ParameterSpec& spec) { return options.held_elsewhere && options.held_elsewhere(spec); };
  std::vector<FlatRequest> requests;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) {
    const auto& spec = weights.layout.parameters[i];
    const std::string first = whole_fused[i] ? whole.parameters[i].fused_hf_name : spec.pieces[0].name;
    if (whole_fused[i] && is_fp8_block_scaled(files, first))
      fail("{}: '{}' is a fused FP8 expert tensor; FP8 experts load from per-expert tensors only", where(files, first), first);
    // MXFP4 dequantizes to bf16, and is saved so (as transformers saves a model it dequantized).
    weights.disk_dtypes.push_back(holds_mxfp4(files, first) ? DType::BF16 : stored_dtype(first));
    if (!is_floating(weights.disk_dtypes.back()))
      fail("{}: tensor '{}' is {}; model weights must be floating point", where(files, first), first,
           dtype_name(weights.disk_dtypes.back()));
    // A buffer stays fp32 whatever the engine's dtype, as transformers keeps e_score_correction_bias
    // (_keep_in_fp32_modules_strict): rounded to bf16 it would change which experts the router picks.
    const bool buffer = spec.role == ParameterRole::Buffer;
    requests.push_back({spec.shape, buffer ? DType::F32 : options.dtype.value_or(weights.disk_dtypes.back()),
                        !held_elsewhere(spec)});
  }
  PlacedBuffers placed = allocate_by_placement(weights.layout, requests, options.device, /*zeroed=*/false, options.shards);
  weights.parameters = std::move(placed.views);
  weights.replicated_runs = std::move(placed.replicated);
  weights.expert_runs = std::move(placed.experts);
  bool dequantized = false;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) {
    const auto& spec = weights.layout.parameters[i];
    // Assembled on the host (casting as it goes), then copied into its place in the device's flat buffer. A held
    // parameter is assembled in the checkpoint's own precision (bf16 or f32; f32 for any other), so that its taker
    // sees the values the CPU engine computes with.
    const bool held = !requests[i].wanted;
    const DType held_dtype = weights.disk_dtypes[i] == DType::BF16 ? DType::BF16 : DType::F32;
    Tensor share;  // a fused checkpoint tensor's run for this parameter
    if (whole_fused[i]) {
      // A share of a fused [E, ...] tensor is a contiguous run of it: only those pages of the file are read.
      const Tensor fused = files.tensor(whole.parameters[i].fused_hf_name);
      const int64_t per_expert = fused.numel() / whole.parameters[i].shape[0];
      const int64_t first_expert = expert_range(whole.parameters[i].shape[0], options.experts).first;
      share = spec.placement == Placement::ExpertSharded ? fused.flat_slice(first_expert * per_expert, spec.shape) : fused;
      if (held && share.dtype() == held_dtype) {  // the file's pages as they are: the taker reads them once
        options.take(i, share);
        continue;
      }
      if (!held && !options.device.is_cpu() && share.dtype() == requests[i].dtype) {
        weights.parameters[i].copy_from(share);  // the file's pages straight to the GPU (core/staged_upload.h)
        continue;
      }
    }
    Tensor parameter = options.device.is_cpu() && !held ? weights.parameters[i]
                                                         : Tensor::empty(spec.shape, held ? held_dtype : requests[i].dtype);
    if (share.defined()) {
      ops::cast_into(share, parameter);
    } else {
      int64_t offset = 0;
      for (const auto& piece : spec.pieces) {
        const bool mxfp4 = holds_mxfp4(files, piece.name);
        dequantized = dequantized || mxfp4;
        Tensor source = mxfp4 ? read_mxfp4(files, piece.name) : files.tensor(piece.name);
        if ((mxfp4 ? source.dtype() : stored_dtype(piece.name)) != weights.disk_dtypes[i])
          fail("{}: tensor '{}' is {} but '{}', fused with it, is {}", where(files, piece.name), piece.name,
               dtype_name(source.dtype()), spec.pieces[0].name, dtype_name(weights.disk_dtypes[i]));
        if (is_fp8_block_scaled(files, piece.name)) {
          source = dequantize_fp8_blocks(source, files.tensor(fp8_scale_name(piece.name)), *fp8_block, piece.name);
          fp8_dequantized = true;
        }
        piece_to_engine(source, piece, parameter.flat_slice(offset, engine_shape(piece)));
        offset += shape_numel(piece.shape);
      }
    }
    if (held)
      options.take(i, parameter);
    else if (!options.device.is_cpu())
      weights.parameters[i].copy_from(parameter);
  }
  for (const std::string& name : files.names())
    if (is_carried_tensor(weights.layout.spec, name)) weights.carried.emplace_back(name, files.tensor(name));
  // The weights are held (and will be saved) dequantized: transformers drops quantization_config the same way.
  if (dequantized) weights.layout.spec.json.erase("quantization_config");
  if (fp8_dequantized) mark_dequantized(weights.layout.spec);
  return weights;
}

void freeze_parameters(ParameterLayout& layout, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    bool matched = false;
    for (ParameterSpec& p : layout.parameters)
      if (name_matches(pattern, p.name)) {
        p.trainable = false;
        matched = true;
      }
    if (!matched) fail("no parameter matches the pattern '{}' to freeze (engine names, e.g. 'layers.*.moe.router')", pattern);
  }
}

bool name_matches(const std::string& pattern, const std::string& name) {
  // '*' matches any run of characters (dots included); everything else literally.
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

NamedTensors to_hf_tensors(const ModelWeights& weights, TensorSelection selection) {
  NamedTensors tensors;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) {
    const auto& spec = weights.layout.parameters[i];
    if (selection == TensorSelection::ExpertsOnly && spec.placement != Placement::ExpertSharded) continue;
    const Tensor& held = weights.parameters[i];
    Tensor parameter = held.device().is_cpu() ? held : held.to(Device::cpu());
    const DType disk_dtype = weights.disk_dtypes[i];
    if (weights.stored_fused[i]) {
      tensors.emplace_back(spec.fused_hf_name, piece_to_hf(parameter, HfTensor{spec.fused_hf_name, spec.shape}, disk_dtype));
      continue;
    }
    int64_t offset = 0;
    for (const auto& piece : spec.pieces) {
      tensors.emplace_back(piece.name, piece_to_hf(parameter.flat_slice(offset, engine_shape(piece)), piece, disk_dtype));
      offset += shape_numel(piece.shape);
    }
  }
  if (selection == TensorSelection::All) tensors.insert(tensors.end(), weights.carried.begin(), weights.carried.end());
  return tensors;
}

void save_checkpoint(const ModelWeights& weights, const fs::path& folder, const io::SaveOptions& options) {
  fs::create_directories(folder);
  io::save_safetensors_folder(folder, to_hf_tensors(weights), options);
  save_model_files(weights, folder);
}

void save_model_files(const ModelWeights& weights, const fs::path& folder) {
  io::write_text_atomically(folder / "config.json", weights.spec().json.dump(2) + "\n");
  std::error_code same_error;
  if (weights.source.empty() || fs::equivalent(weights.source, folder, same_error)) return;
  for (const char* name : kCompanionFiles)
    if (fs::exists(weights.source / name))
      io::copy_file_atomically(weights.source / name, folder / name);
}

}  // namespace moetune::model
