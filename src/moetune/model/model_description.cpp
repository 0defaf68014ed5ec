#include "moetune/model/model_description.h"

#include "moetune/core/error.h"
#include "moetune/io/config_reader.h"
#include "moetune/io/json_file.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

using nlohmann::json;

std::string supported_list() {
  std::string names;
  for (const Family* family : families())
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", family->architecture, family->model_type);
  return names;
}

const Family& resolve_family(const json& config) {
  auto architectures = config.find("architectures");
  if (architectures != config.end() && !architectures->is_null()) {
    if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string())
      fail("'architectures' must be a list of class names");
    const std::string architecture = (*architectures)[0].get<std::string>();
    for (const Family* family : families())
      if (architecture == family->architecture) return *family;
    fail("architecture '{}' is not supported; supported: {}", architecture.substr(0, 100), supported_list());
  }
  const std::string model_type = io::ConfigReader(config).string("model_type", "");
  for (const Family* family : families())
    if (model_type == family->model_type) return *family;
  fail("neither 'architectures' nor a supported 'model_type' (got '{}'); supported: {}", model_type.substr(0, 100),
       supported_list());
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
    const Family& family = resolve_family(config);
    ModelSpec spec = family.describe(io::ConfigReader(config));
    spec.family = family.model_type;
    spec.architecture = family.architecture;
    spec.json = config;
    return spec;
  });
}

ModelSpec load_model_spec(const std::filesystem::path& config_json) {
  return describe_model(io::read_json_file(config_json), config_json.string());
}

ParameterLayout parameter_layout(const ModelSpec& spec) { return {spec, family_of(spec).parameters(spec)}; }

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Family* family : families()) names.push_back(family->architecture);
  return names;
}

}  // namespace moetune::model
