#include "moetune/model/model_description.h"

#include "moetune/core/error.h"
#include "moetune/io/config_reader.h"
#include "moetune/io/json_file.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/text_of_multimodal.h"

namespace moetune::model {
namespace {

using nlohmann::json;

std::string supported_list() {
  std::string names;
  for (const Family* family : families())
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", family->architecture, family->model_type);
  for (const MultimodalWrapper& wrapper : multimodal_wrappers())
    names += fmt::format(", {} ({}, its language model)", wrapper.architecture, wrapper.model_type);
  return names;
}

const Family* family_by_model_type(const std::string& model_type) {
  for (const Family* family : families())
    if (model_type == family->model_type) return family;
  return nullptr;
}

const Family* family_by_architecture(const std::string& architecture) {
  for (const Family* family : families())
    if (architecture == family->architecture) return family;
  return nullptr;
}

// As transformers' AutoModelForCausalLM: model_type picks the family (architectures may name another head class,
// e.g. "LlamaModel", or be absent). A model_type moetune does not know falls back to architectures[0], which is
// how remote-code configs of a known architecture read (Kimi-K2: model_type "kimi_k2", DeepseekV3ForCausalLM).
// The two naming different known families is refused, naming both.
const Family& resolve_family(const json& config) {
  std::string architecture;
  if (auto architectures = config.find("architectures"); architectures != config.end() && !architectures->is_null()) {
    if (!architectures->is_array() || (!architectures->empty() && !(*architectures)[0].is_string()))
      fail("'architectures' must be a list of class names");
    if (!architectures->empty()) architecture = (*architectures)[0].get<std::string>();
  }
  const std::string model_type = io::ConfigReader(config).string("model_type", "");
  const Family* by_type = family_by_model_type(model_type);
  const Family* by_architecture = family_by_architecture(architecture);
  if (by_type && by_architecture && by_type != by_architecture)
    fail("'model_type' is '{}' but 'architectures' names {} ({}): transformers builds the model_type's family; fix "
         "whichever is wrong", model_type.substr(0, 100), architecture.substr(0, 100), by_architecture->model_type);
  if (by_type) return *by_type;
  if (by_architecture) return *by_architecture;
  if (!architecture.empty() || !model_type.empty())
    fail("model_type '{}' / architecture '{}' is not supported; supported: {}", model_type.substr(0, 100),
         architecture.substr(0, 100), supported_list());
  fail("neither 'architectures' nor a supported 'model_type' (got '{}'); supported: {}", model_type.substr(0, 100),
       supported_list());
}

// The families name the decoder's tensors model.* and the head's lm_head.* (Nemotron-H names its backbone.* itself);
// a checkpoint that keeps them elsewhere (ModelSpec::CheckpointNames) gets them renamed in parameter_layout, once, for
// loading and saving alike.
std::string checkpoint_name(const ModelSpec::CheckpointNames& names, const std::string& name) {
  if (name.starts_with("model.")) return names.decoder + name.substr(6);
  if (name.starts_with("lm_head.")) return names.head + name.substr(8);
  return name;
}

const Family& family_of(const ModelSpec& spec) {
  for (const Family* family : families())
    if (spec.family == family->model_type) return *family;
  fail("no model family '{}'", spec.family);
}

}  // namespace

ModelSpec describe_model(const json& config, const std::string& source) {
  return with_context(source, [&] {
    if (!config.is_object()) fail("not a JSON object");
    ModelSpec spec;
    const Family* family = nullptr;  // whose parameters the model has: a wrapper's are its language model's
    std::string architecture;
    if (const MultimodalWrapper* wrapper = find_multimodal_wrapper(config)) {
      family = family_by_model_type(wrapper->text_model_type);
      if (!family)
        fail("no model family '{}' for {}'s language model", wrapper->text_model_type, wrapper->architecture);
      spec = describe_text_of_multimodal(*wrapper, config, *family);
      architecture = wrapper->architecture;
    } else {
      family = &resolve_family(config);
      spec = family->describe(io::ConfigReader(config));
      architecture = family->architecture;
    }
    spec.family = family->model_type;
    spec.architecture = architecture;
    spec.json = config;
    return spec;
  });
}

ModelSpec load_model_spec(const std::filesystem::path& config_json) {
  return describe_model(io::read_json_file(config_json), config_json.string());
}

ParameterLayout parameter_layout(const ModelSpec& spec) {
  std::vector<ParameterSpec> parameters = family_of(spec).parameters(spec);
  const ModelSpec::CheckpointNames& names = spec.checkpoint_names;
  if (names.decoder != "model." || names.head != "lm_head.")
    for (ParameterSpec& parameter : parameters) {
      for (HfTensor& piece : parameter.pieces) piece.name = checkpoint_name(names, piece.name);
      if (!parameter.fused_hf_name.empty()) parameter.fused_hf_name = checkpoint_name(names, parameter.fused_hf_name);
    }
  return {spec, std::move(parameters)};
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Family* family : families()) names.push_back(family->architecture);
  for (const MultimodalWrapper& wrapper : multimodal_wrappers()) names.push_back(wrapper.architecture);
  return names;
}

}  // namespace moetune::model
