#include "moetune/model/lora_weights.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "moetune/io/atomic_file.h"
#include "moetune/model/piece_transform.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/lora.h"

namespace moetune::model {
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

// The module as PEFT addresses it: by its in-memory name, where the checkpoint may say otherwise (transformers 5
// renames on load, conversion_mapping.py): Nemotron-H's backbone.* is model.*, a vision-language model's
// language_model.model.* is model.language_model.* (ModelSpec::CheckpointNames).
std::string module_of(const ModelSpec& spec, const std::string& tensor_name) {
  const std::string module = tensor_name.substr(0, tensor_name.rfind('.'));
  const ModelSpec::CheckpointNames& names = spec.checkpoint_names;
  return module.starts_with(names.decoder) ? names.decoder_in_memory + module.substr(names.decoder.size()) : module;
}
std::string leaf_of(const std::string& module) { return module.substr(module.rfind('.') + 1); }

// The MLP module names PEFT 0.21 rewrites, on these model types, into the fused experts' target_parameters
// (gate_up_proj at twice the rank and alpha), leaving dense MLPs (and the DeepSeek-style families' shared
// experts) without LoRA: an adapter on such a module would not load alike in PEFT, so
// moetune does not make one. The model types are those of transformers 5.17's conversion_mapping that PEFT 0.21's
// transformers_weight_conversion.py converts (its _MOE_TARGET_MODULE_MAPPING: qwen2_moe's names for the models mapped
// onto qwen2_moe's conversion, mixtral's; qwen2_moe itself is not converted).
std::vector<std::string> peft_converted_mlp_names(const std::string& family) {
  // (OLMoE and MiniMax-M2 are converted too, but have no such modules outside their experts.)
  static const std::set<std::string> qwen2_moe_converted = {
      "qwen3_moe", "deepseek_v2",   "deepseek_v3", "dots1",        "exaone_moe",
      "glm4_moe",  "glm4_moe_lite", "solar_open",  "ernie4_5_moe", "qwen3_next"};
  if (qwen2_moe_converted.contains(family)) return {"gate_proj", "up_proj", "down_proj"};
  if (family == "mixtral") return {"w1", "w2", "w3"};
  return {};
}

bool names_explicitly(const LoraConfig& config, const std::string& leaf) {
  if (!config.lists_module_names()) return false;
  for (const std::string& target : config.target_modules)
    if (peft_names(leaf, target)) return true;
  return false;
}

// Every listed target must name something adapted: a typo is an error, not a silently smaller adapter.
void require_each_used(const std::vector<std::string>& targets, const std::set<std::string>& used, const char* key,
                       const char* kind, const std::string& architecture) {
  for (const std::string& target : targets)
    if (std::none_of(used.begin(), used.end(), [&](const std::string& name) { return peft_names(target, name); }))
      fail("lora.{}: '{}' names no {} of this {} model", key, target, kind, architecture);
}

// PEFT's kaiming_uniform_(a=√5) on a [rows, fan_in] matrix: U(-1/√fan_in, 1/√fan_in).
Tensor kaiming_uniform(int64_t rows, int64_t fan_in, std::mt19937_64& rng) {
  Tensor t = Tensor::empty({rows, fan_in}, DType::F32);
  const float bound = float(1.0 / std::sqrt(double(fan_in)));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = uniform(rng);
  return t;
}

struct Adapter {
  std::string weight;   // engine name of the adapted weight
  size_t piece;         // which of its pieces (experts: 0)
  std::string module;   // PEFT's module path the tensors hang from, without the prefix
  int64_t rank_rows, in, out, rank_columns;  // A [rank_rows, in], B [out, rank_columns]
  double active_fraction;
  bool interleaved_outputs = false;  // B's rows interleave gate and up on disk (GPT-OSS's gate_up_proj)
  PartialRotary partial_rotary;      // B's rows are partially rotated heads (GLM-4-MoE's q_proj / k_proj)
  GroupedRows grouped_rows;          // B's rows are grouped (Qwen3-Next's gated q_proj)
};

// A LoRA B between the adapter file's row order and the engine's: its rows are the adapted piece's outputs, kept
// in the engine's order as the piece's are (model/piece_transform.h).
Tensor adapter_rows(const Tensor& b, const HfTensor& piece, bool to_engine) {
  if (!to_engine) {
    const Tensor rows = reorder_grouped_rows(reorder_partial_rotary_rows(b, piece.partial_rotary, /*to_engine=*/false),
                                             piece.grouped_rows, /*to_engine=*/false);
    return piece.interleaved_pairs ? reorder_interleaved_rows(rows, /*to_halves=*/false) : rows;
  }
  const Tensor rows = piece.interleaved_pairs ? reorder_interleaved_rows(b, /*to_halves=*/true) : b;
  return reorder_partial_rotary_rows(reorder_grouped_rows(rows, piece.grouped_rows, /*to_engine=*/true),
                                     piece.partial_rotary, /*to_engine=*/true);
}

void append_specs(std::vector<ParameterSpec>& specs, const Adapter& adapter) {
  for (const char* which : {"lora_A", "lora_B"}) {
    const bool is_b = which[5] == 'B';
    const Shape shape = is_b ? Shape{adapter.out, adapter.rank_columns} : Shape{adapter.rank_rows, adapter.in};
    specs.push_back({lora_parameter_name(adapter.weight, which, adapter.piece),
                     shape,
                     ParameterRole::Matmul,
                     {HfTensor{kPeftPrefix + adapter.module + "." + which + ".weight", shape, false,
                               is_b && adapter.interleaved_outputs, is_b ? adapter.partial_rotary : PartialRotary{},
                               is_b ? adapter.grouped_rows : GroupedRows{}}},
                     "",
                     int64_t(double(shape_numel(shape)) * adapter.active_fraction)});
  }
}

// The name PEFT's target_parameters match for fused experts: transformers' in-memory parameter, which GPT-OSS's
// checkpoint stores as is (one transposed piece) and the others as per-expert pieces (fused_hf_name); "" if none.
std::string fused_expert_parameter(const ParameterSpec& spec) {
  if (!spec.fused_hf_name.empty()) return spec.fused_hf_name;
  if (spec.pieces.size() == 1 && spec.pieces[0].transposed && spec.shape.size() == 3) return spec.pieces[0].name;
  return "";
}

// The adapter file's tensors: index into weights.parameters -> name in adapter_model.safetensors.
std::vector<std::pair<size_t, std::string>> adapter_entries(const ModelWeights& weights) {
  std::vector<std::pair<size_t, std::string>> entries;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) {
    const ParameterSpec& spec = weights.layout.parameters[i];
    if (is_lora_parameter(spec)) entries.emplace_back(i, spec.pieces[0].name);
    else if (spec.trainable) entries.emplace_back(i, kPeftPrefix + spec.pieces[0].name);  // a module to save
  }
  return entries;
}

// PEFT's modules_to_save: those parameters stay trainable. Each entry must name a module, and a fused engine
// parameter must be saved whole.
void keep_modules_trainable(ParameterLayout& layout, const std::vector<std::string>& modules) {
  for (const std::string& target : modules) {
    bool found = false;
    for (ParameterSpec& spec : layout.parameters) {
      size_t named = 0;
      for (const HfTensor& piece : spec.pieces) named += peft_names(target, module_of(layout.spec, piece.name));
      if (named == 0) continue;
      if (spec.pieces.size() != 1 || spec.pieces[0].transposed || !spec.fused_hf_name.empty())
        fail("lora.modules_to_save: '{}' names part of the fused weight '{}' (training it in full is not supported; "
             "name a norm, the router (gate) or another single-tensor module)", target, spec.name);
      spec.trainable = found = true;
    }
    if (!found) fail("lora.modules_to_save: '{}' names no module of this {} model", target, layout.spec.architecture);
  }
}

}  // namespace

std::string lora_parameter_name(const std::string& weight, const char* which, size_t piece) {
  return fmt::format("{}.{}.{}", weight, which, piece);
}

bool is_lora_parameter(const ParameterSpec& spec) {
  return spec.name.find(".lora_A.") != std::string::npos || spec.name.find(".lora_B.") != std::string::npos;
}

std::vector<ParameterSpec> lora_parameters(const ParameterLayout& layout, const LoraConfig& config) {
  MOETUNE_CHECK(config.enabled(), "lora_parameters: rank {}", config.rank);
  const int64_t r = config.rank;
  std::vector<Adapter> adapters;
  std::set<std::string> used_modules, used_parameters;
  std::map<std::string, std::vector<size_t>> expert_adapters_by_module;  // PEFT nests them: see below
  const std::vector<std::string> converted = peft_converted_mlp_names(layout.spec.family);
  for (const ParameterSpec& spec : layout.parameters) {
    const double active = double(spec.active_numel) / double(std::max<int64_t>(1, shape_numel(spec.shape)));
    if (spec.role == ParameterRole::Matmul) {
      for (size_t i = 0; i < spec.pieces.size(); ++i) {
        const HfTensor& piece = spec.pieces[i];
        const std::string module = module_of(layout.spec, piece.name);
        if (!piece.name.ends_with(".weight") || !config.targets_module(module)) continue;
        if (std::find(converted.begin(), converted.end(), leaf_of(module)) != converted.end()) {
          if (names_explicitly(config, leaf_of(module)))
            fail(
                "lora.target_modules: '{}' on {}: PEFT 0.21 maps this name onto the fused experts (with the gate_up "
                "rank doubled) and leaves dense and shared-expert MLPs without LoRA, so PEFT would not load such an "
                "adapter alike; name the experts with lora.target_parameters [mlp.experts.gate_up_proj, "
                "mlp.experts.down_proj]",
                leaf_of(module), layout.spec.family);
          continue;  // a regex or all-linear: the dense MLP is left out, as PEFT leaves it out
        }
        if (piece.transposed) fail("LoRA on '{}': transposed checkpoint tensors are not supported yet", piece.name);
        used_modules.insert(module);
        adapters.push_back({spec.name, i, module, r, piece.shape[1], piece.shape[0], r, active, false,
                            piece.partial_rotary, piece.grouped_rows});
      }
    } else if (const std::string parameter = spec.role == ParameterRole::Experts ? fused_expert_parameter(spec) : "";
               !parameter.empty() && config.targets_parameter(parameter)) {
      // PEFT's in / out features are the engine's [E, out, in] whichever way the checkpoint stores the experts
      // (GPT-OSS's [E, in, out] experts declare is_transposed); only the order of B's rows may differ.
      const int64_t experts = spec.shape[0];
      used_parameters.insert(parameter);
      expert_adapters_by_module[module_of(layout.spec, parameter)].push_back(adapters.size());
      adapters.push_back({spec.name, 0, module_of(layout.spec, parameter), experts * r, spec.shape[2], spec.shape[1],
                          r * experts, active, spec.pieces.size() == 1 && spec.pieces[0].interleaved_pairs});
    }
  }
  // PEFT wraps a module's targeted parameters one inside the other in their definition order, so the first of n
  // hangs below n-1 "base_layer"s: gate_up_proj is "experts.base_layer.lora_A" when down_proj is targeted too.
  for (const auto& [module, indices] : expert_adapters_by_module)
    for (size_t i = 0; i < indices.size(); ++i)
      for (size_t nesting = i + 1; nesting < indices.size(); ++nesting) adapters[indices[i]].module += ".base_layer";

  if (adapters.empty())
    fail("lora: target_modules {} and target_parameters {} match no weight of this {} model", fmt::join(config.target_modules, ", "),
         fmt::join(config.target_parameters, ", "), layout.spec.architecture);
  if (config.lists_module_names())
    require_each_used(config.target_modules, used_modules, "target_modules", "linear module", layout.spec.architecture);
  require_each_used(config.target_parameters, used_parameters, "target_parameters", "fused expert parameter", layout.spec.architecture);
  std::vector<ParameterSpec> specs;
  for (const Adapter& adapter : adapters) append_specs(specs, adapter);
  return specs;
}

void attach_lora(ModelWeights& weights, const LoraConfig& config) {
  MOETUNE_CHECK(!weights.lora, "attach_lora: these weights already have LoRA adapters");
  const std::vector<ParameterSpec> adapters = lora_parameters(weights.layout, config);
  for (ParameterSpec& spec : weights.layout.parameters) spec.trainable = false;  // the base model is frozen
  keep_modules_trainable(weights.layout, config.modules_to_save);
  std::mt19937_64 rng(config.seed);
  for (const ParameterSpec& spec : adapters) {
    const bool is_a = spec.name.find(".lora_A.") != std::string::npos;
    weights.layout.parameters.push_back(spec);
    weights.parameters.push_back(is_a ? kaiming_uniform(spec.shape[0], spec.shape[1], rng) : Tensor::zeros(spec.shape, DType::F32));
    weights.disk_dtypes.push_back(DType::F32);
    weights.stored_fused.push_back(false);
  }
  weights.lora = std::make_shared<const LoraConfig>(config);
}

io::NamedTensors lora_tensors(const ModelWeights& weights, const std::vector<Tensor>& tensors) {
  io::NamedTensors named;
  for (const auto& [i, name] : adapter_entries(weights)) {
    if (!tensors[i].defined()) continue;
    named.emplace_back(name, adapter_rows(tensors[i], weights.layout.parameters[i].pieces[0], /*to_engine=*/false));
  }
  return named;
}

void load_adapter_weights(ModelWeights& weights, const std::filesystem::path& adapter_folder) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(adapter_folder / "adapter_model.safetensors");
  const std::vector<std::pair<size_t, std::string>> entries = adapter_entries(weights);
  for (const auto& [i, name] : entries) {
    const ParameterSpec& spec = weights.layout.parameters[i];
    if (!file.contains(name))
      fail("{}: no tensor '{}' (the adapter was made for other targets or another model)", file.path().string(), name);
    if (file.entry(name).shape != spec.shape)
      fail("{}: '{}' has shape {}, but this model and adapter_config.json imply {}", file.path().string(), name,
           shape_str(file.entry(name).shape), shape_str(spec.shape));
    const Tensor stored = file.tensor(name);
    ops::cast_into(adapter_rows(stored, spec.pieces[0], /*to_engine=*/true), weights.parameters[i]);
  }
  for (const io::SafetensorsEntry& entry : file.entries())
    if (std::none_of(entries.begin(), entries.end(), [&](const auto& e) { return e.second == entry.name; }))
      fail("{}: unexpected tensor '{}' (not an adapter of this model's targets)", file.path().string(), entry.name);
}

ModelWeights load_with_adapter(const std::filesystem::path& base, const std::filesystem::path& adapter_folder) {
  ModelWeights weights = load_checkpoint(base, LoadOptions{DType::F32});
  attach_lora(weights, read_adapter_config(adapter_folder));
  load_adapter_weights(weights, adapter_folder);
  return weights;
}

void save_adapter(const ModelWeights& weights, const std::filesystem::path& folder) {
  MOETUNE_CHECK(weights.lora, "save_adapter: these weights have no LoRA adapters");
  std::filesystem::create_directories(folder);
  io::save_safetensors(folder / "adapter_model.safetensors", lora_tensors(weights, weights.parameters));
  std::vector<std::string> modules;  // the adapted linear modules (experts are target_parameters)
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) index[weights.layout.parameters[i].name] = i;
  for (const ParameterSpec& spec : weights.layout.parameters) {
    const size_t at = spec.name.find(".lora_A.");
    if (at == std::string::npos) continue;
    const ParameterSpec& base = weights.layout.parameters[index.at(spec.name.substr(0, at))];
    if (base.role == ParameterRole::Matmul)
      modules.push_back(module_of(weights.spec(), base.pieces[std::stoul(spec.name.substr(at + 8))].name));
  }
  std::sort(modules.begin(), modules.end());
  LoraConfig config = *weights.lora;
  if (config.base_model.empty()) config.base_model = weights.source.string();
  io::write_text_atomically(folder / "adapter_config.json", peft_adapter_config(config, modules).dump(2) + "\n");
}

void merge_lora(ModelWeights& weights) {
  MOETUNE_CHECK(weights.lora, "merge_lora: these weights have no LoRA adapters");
  const float scale = float(weights.lora->scale());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) index[weights.layout.parameters[i].name] = i;
  std::vector<bool> keep(weights.parameters.size(), true);
  for (size_t i = 0; i < weights.layout.parameters.size(); ++i) {
    const std::string& name = weights.layout.parameters[i].name;
    const size_t at = name.find(".lora_A.");
    if (at == std::string::npos) {
      keep[i] = !is_lora_parameter(weights.layout.parameters[i]);
      continue;
    }
    keep[i] = false;
    const std::string base = name.substr(0, at);
    const size_t piece = std::stoul(name.substr(at + 8));
    const Tensor& a = weights.parameters[i];
    const Tensor& b = weights.parameters[index.at(lora_parameter_name(base, "lora_B", piece))];
    const size_t w = index.at(base);
    const ParameterSpec& spec = weights.layout.parameters[w];
    Tensor target = weights.parameters[w];
    MOETUNE_CHECK(target.dtype() == DType::F32, "merge_lora: '{}' must be fp32 to merge into, is {}", base, target.str());
    const auto add_product = [&](const Tensor& bm, const Tensor& am, float* rows) {  // rows [out, in] += scale · B A
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(bm.size(0)), int(am.size(1)), int(am.size(0)), scale,
                  bm.data<float>(), int(bm.size(1)), am.data<float>(), int(am.size(1)), 1.0f, rows, int(am.size(1)));
    };
    if (spec.role == ParameterRole::Experts) {
      const int64_t experts = spec.shape[0], r = a.size(0) / experts;
      for (int64_t e = 0; e < experts; ++e)
        add_product(ops::expert_lora_b(b, e, experts), a.narrow(e * r, r), target[e].data<float>());
    } else {
      int64_t first_row = 0;
      for (size_t p = 0; p < piece; ++p) first_row += spec.pieces[p].shape[0];
      add_product(b, a, target.data<float>() + first_row * target.size(1));
    }
  }
  ModelWeights merged = weights;
  merged.layout.parameters.clear();
  merged.parameters.clear();
  merged.disk_dtypes.clear();
  merged.stored_fused.clear();
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    merged.layout.parameters.push_back(weights.layout.parameters[i]);
    merged.layout.parameters.back().trainable = true;
    merged.parameters.push_back(weights.parameters[i]);
    merged.disk_dtypes.push_back(weights.disk_dtypes[i]);
    merged.stored_fused.push_back(weights.stored_fused[i]);
  }
  merged.lora.reset();
  weights = std::move(merged);
}

}  // namespace moetune::model
