// LoRA adapters as engine parameters. attach_lora() appends, for each targeted weight, its A and B to the
// model's parameters (trainable; every other parameter frozen), named after the engine weight they adapt:
// "layers.0.attn.qkv.lora_A.1" is the A of the qkv weight's piece 1 (k_proj), "layers.0.moe.experts_down.lora_B.0"
// the B of that layer's experts. Each holds exactly the tensor PEFT saves (its HF name is PEFT's, e.g.
// "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"; experts "…mlp.experts.base_layer.lora_A.weight"
// for gate_up_proj when down_proj is targeted too, as PEFT nests its ParamWrappers), so an adapter is saved and
// loaded by name, with no transform.
#pragma once

#include <filesystem>
#include <memory>

#include "moetune/model/checkpoint.h"
#include "moetune/model/lora_config.h"

namespace moetune::model {

// The adapters' parameter specs for `layout` (trainable, after the base's in the order attach_lora appends
// them). Fails naming a target that matches nothing.
std::vector<ParameterSpec> lora_parameters(const ParameterLayout& layout, const LoraConfig& config);

// Appends the adapters (A kaiming-uniform(a=√5) as PEFT initialises it, from config.seed; B zeros) and freezes
// the base weights but those of config.modules_to_save. Fails naming a target that matches nothing.
void attach_lora(ModelWeights& weights, const LoraConfig& config);

// The engine name of the LoRA tensor `which` ("lora_A" or "lora_B") for piece `piece` of engine weight `weight`.
std::string lora_parameter_name(const std::string& weight, const char* which, size_t piece);
bool is_lora_parameter(const ParameterSpec& spec);

// The adapter's tensors under PEFT's names: the LoRA parameters of `tensors` (parallel to weights.parameters:
// the values, or the gradients), and the modules_to_save ("base_model.model." + their HF name, as PEFT saves them).
io::NamedTensors lora_tensors(const ModelWeights& weights, const std::vector<Tensor>& tensors);
// Copies an adapter_model.safetensors into the LoRA parameters; its names and shapes must be exactly theirs.
void load_adapter_weights(ModelWeights& weights, const std::filesystem::path& adapter_folder);
// A base model folder (fp32) with a PEFT adapter folder's adapters attached and loaded.
ModelWeights load_with_adapter(const std::filesystem::path& base, const std::filesystem::path& adapter_folder);
// adapter_config.json + adapter_model.safetensors, as PEFT's save_pretrained writes them.
void save_adapter(const ModelWeights& weights, const std::filesystem::path& folder);

// Folds each adapter into the weight it adapts (W += scale · B A, per expert for experts) and drops the LoRA
// parameters: what PEFT's merge_and_unload gives.
void merge_lora(ModelWeights& weights);

}  // namespace moetune::model
