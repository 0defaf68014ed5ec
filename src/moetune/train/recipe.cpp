#include "moetune/train/recipe.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>

#include "moetune/core/error.h"
#include "moetune/data/line_mapping.h"
#include "moetune/data/mixing.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"

namespace moetune::train {
namespace {

using nlohmann::json;

// Every key a recipe may set, with its default. Lists start empty; `null` means "may be a string or absent".
constexpr const char* kDefaultRecipe = R"({
  "model": "",
  "data": {"train": [], "validation": [], "validation_fraction": 0.0, "format": "auto", "loss_on_prompt": false,
           "max_length": 512, "packing": true, "shuffle": true, "bad_lines": "error", "chat_template": "",
           "chat_template_kwargs": {}, "columns": {}, "roles": {}, "train_weights": {}},
  "training": {"micro_batch_size": 4, "gradient_accumulation_steps": 1, "max_steps": 0, "epochs": 1.0,
               "seed": 1234, "device": "auto", "max_nonfinite_steps": 0, "aux_loss": "config",
               "aux_loss_coef": "config", "freeze": [], "router_bias_update_rate": 0.0, "profile": false,
               "recompute": "none", "recompute_keep_layers": 0, "lm_head_chunk_rows": 0},
  "optimizer": {"lr": 1e-5, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0,
                "precision": "fp32", "state": "fp32", "update_in_backward": "auto",
                "lazy_embedding": "auto", "norm_in_backward": "off",
                "norm_from_expert_gemms": "on"},
  "schedule": {"type": "cosine", "warmup_steps": 0, "min_lr_ratio": 0.0},
  "output": {"dir": "moetune-output", "save_every": 0, "keep_last": 2, "save_final": true},
  "logging": {"every": 1, "validation_every": 0, "tensorboard": true},
  "parallel": {"expert": 1, "timeout_seconds": 1800, "overlap": true},
  "lora": {"rank": 0, "alpha": 16.0, "dropout": 0.0, "target_modules": [], "target_parameters": [],
           "modules_to_save": [], "use_rslora": false, "adapter": "", "quantize": "none"}
})";

// A recipe holds a few dozen values three levels deep; this many, or this deep, is no recipe (and recursing
// deeper could overflow the stack).
constexpr int64_t kMaxYamlValues = 100000;
constexpr int kMaxYamlDepth = 100;

// YAML -> JSON, with scalars typed as YAML 1.2 core schema reads them (true/false, ints, floats, else strings).
// yaml-cpp shares aliased nodes, so a few hundred bytes of nested aliases expand to billions of values here:
// `budget` counts the values left to build and refuses the rest.
// Where each mapping key of a recipe file stands: "optimizer.lr" -> its line, so that errors can point there.
using KeyLines = std::map<std::string, int>;

json to_json(const YAML::Node& node, int64_t& budget, const std::string& source, KeyLines& lines, const std::string& path = "",
             int depth = 1) {
  if (--budget < 0) fail("{}: more than {} values once its aliases are expanded (a YAML alias bomb?)", source, kMaxYamlValues);
  if (depth > kMaxYamlDepth) fail("{}: nested deeper than {} levels", source, kMaxYamlDepth);
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      json list = json::array();
      for (const auto& item : node) list.push_back(to_json(item, budget, source, lines, path, depth + 1));
      return list;
    }
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& item : node) {
        const std::string key = item.first.as<std::string>();
        // YAML says keys are unique, yaml-cpp keeps the last: a repeated key is almost always a mistake.
        if (object.contains(key)) fail("{}: key '{}' appears twice in one mapping (line {})", source, key, item.first.Mark().line + 1);
        const std::string key_path = path.empty() ? key : path + "." + key;
        lines.emplace(key_path, item.first.Mark().line + 1);
        object[key] = to_json(item.second, budget, source, lines, key_path, depth + 1);
      }
      return object;
    }
    case YAML::NodeType::Scalar: break;
  }
  const std::string text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  if (text == "null" || text == "~") return nullptr;
  try {
    size_t used = 0;
    const long long integer = std::stoll(text, &used);
    if (used == text.size()) return integer;
    const double number = std::stod(text, &used);
    if (used == text.size()) return number;
  } catch (const std::exception&) {
  }
  return text;
}

json parse_yaml(const std::string& text, const std::string& source, KeyLines& lines) {
  try {
    int64_t budget = kMaxYamlValues;
    return to_json(YAML::Load(text), budget, source, lines);
  } catch (const YAML::Exception& e) {
    fail("{}: not YAML: {}", source, e.what());
  }
}

std::string type_name(const json& value) {
  if (value.is_boolean()) return "true/false";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "a mapping";
  return "null";
}

// Copies `given` onto `target` (the defaults), refusing keys the defaults lack and values of another type.
// An integer is accepted where a number is expected, and a single string where a list of strings is.
// "recipe.yaml:12" when the file's line of `key_path` is known, else the source alone.
std::string where(const std::string& source, const KeyLines& lines, const std::string& key_path) {
  auto found = lines.find(key_path);
  return found == lines.end() ? source : fmt::format("{}:{}", source, found->second);
}

void merge(json& target, const json& given, const std::string& path, const std::string& source_name, const KeyLines& lines) {
  if (!given.is_object())
    fail("{}: '{}' must be a mapping, got {}", where(source_name, lines, path), path.empty() ? "<top>" : path, io::abbreviated_dump(given));
  for (const auto& [key, value] : given.items()) {
    const std::string key_path = path.empty() ? key : path + "." + key;
    const std::string source = where(source_name, lines, key_path);
    if (!target.contains(key)) {
      std::string known;
      for (const auto& [name, unused] : target.items()) known += (known.empty() ? "" : ", ") + name;
      fail("{}: unknown key '{}' (known here: {})", source, key_path, known);
    }
    json& slot = target[key];
    if (value.is_null()) continue;  // `key:` with nothing after it keeps the default
    if (slot.is_object() && slot.empty()) {  // a free-form mapping (data.chat_template_kwargs): any keys
      if (!value.is_object()) fail("{}: '{}' must be a mapping, got {}", source, key_path, io::abbreviated_dump(value));
      slot = value;
    } else if (slot.is_object()) {
      merge(slot, value, key_path, source_name, lines);
    } else if (slot.is_array()) {
      json list = value.is_string() ? json::array({value}) : value;
      if (!list.is_array()) fail("{}: '{}' must be a list, got {}", source, key_path, io::abbreviated_dump(value));
      for (const json& item : list)
        if (!item.is_string()) fail("{}: '{}' must list strings, got {}", source, key_path, io::abbreviated_dump(item));
      slot = list;
    } else if (key_path == "training.micro_batch_size" && value == "auto") {  // chosen by the memory plan
      slot = value;
    } else if (slot == "config" && value.is_number()) {  // a key whose default defers to config.json
      slot = value.get<double>();
    } else if (slot.is_number_float() && value.is_number()) {
      slot = value.get<double>();
    } else if (slot.is_number_integer() && value.is_number_integer()) {
      slot = value.get<int64_t>();
    } else if (slot.type() == value.type() && !slot.is_number()) {
      slot = value;
    } else {
      fail("{}: '{}' must be {}, got {}", source, key_path, type_name(slot), io::abbreviated_dump(value));
    }
  }
}

void apply_override(json& recipe, const std::string& assignment) {
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0)
    fail("--set '{}': expected key.path=value, for example --set optimizer.lr=2e-5", assignment);
  const std::string path = assignment.substr(0, equals);
  std::vector<std::string> keys;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (keys.back().empty()) fail("--set '{}': the key path '{}' has an empty part", assignment, path);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // Build {"a": {"b": value}} and merge it, so overrides get the same checks as the file.
  KeyLines no_lines;  // the value's lines are those of a one-line argument
  json nested = parse_yaml(assignment.substr(equals + 1), "--set " + path, no_lines);
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) nested = json{{*key, nested}};
  merge(recipe, nested, "", "--set " + assignment, {});
}

void require(bool condition, const std::string& source, const std::string& message) {
  if (!condition) fail("{}: {}", source, message);
}

Recipe to_recipe(const json& j, const std::string& source) {
  Recipe r;
  r.json = j;
  r.model = j["model"];
  const json& d = j["data"];
  r.data = {d["train"], d["validation"], d["validation_fraction"], d["format"], d["loss_on_prompt"], d["max_length"],
            d["packing"], d["shuffle"], d["bad_lines"], d["chat_template"], d["chat_template_kwargs"],
            d["columns"], d["roles"], d["train_weights"]};
  const json& t = j["training"];
  const bool micro_batch_auto = t["micro_batch_size"] == "auto";
  r.training = {micro_batch_auto ? int64_t(1) : t["micro_batch_size"].get<int64_t>(), t["gradient_accumulation_steps"], t["max_steps"], t["epochs"], t["seed"],
                t["device"], t["max_nonfinite_steps"], t["aux_loss"], std::nullopt, t["freeze"],
                t["router_bias_update_rate"], t["profile"], t["recompute"], t["recompute_keep_layers"], micro_batch_auto,
                t["lm_head_chunk_rows"]};
  if (t["aux_loss_coef"].is_number()) r.training.aux_loss_coef = t["aux_loss_coef"].get<double>();
  else if (t["aux_loss_coef"] != "config")
    fail("{}: 'training.aux_loss_coef' must be config or a number, got {}", source, io::abbreviated_dump(t["aux_loss_coef"]));
  const json& o = j["optimizer"];
  r.optimizer = {o["lr"], o["beta1"], o["beta2"], o["eps"], o["weight_decay"], o["max_grad_norm"], o["precision"], o["state"],
                 o["update_in_backward"], o["lazy_embedding"], o["norm_in_backward"], o["norm_from_expert_gemms"]};
  const json& s = j["schedule"];
  r.schedule = {s["type"], s["warmup_steps"], s["min_lr_ratio"]};
  const json& out = j["output"];
  r.output = {out["dir"], out["save_every"], out["keep_last"], out["save_final"]};
  const json& l = j["logging"];
  r.logging = {l["every"], l["validation_every"], l["tensorboard"]};
  r.parallel = {j["parallel"]["expert"], j["parallel"]["timeout_seconds"], j["parallel"]["overlap"]};
  const json& lora = j["lora"];
  r.lora.settings = {lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"], lora["target_parameters"],
                     lora["modules_to_save"], lora["use_rslora"], uint64_t(r.training.seed)};
  r.lora.adapter = lora["adapter"];
  r.lora.quantize = lora["quantize"];
  r.lora.settings.validate(source);

  const auto one_of = [&](const std::string& key, const std::string& value, std::initializer_list<const char*> allowed) {
    std::string list;
    for (const char* a : allowed) {
      if (value == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    fail("{}: '{}' is '{}', not one of: {}", source, key, value, list);
  };
  one_of("data.format", r.data.format, {"auto", "text", "prompt_completion", "messages", "sharegpt", "alpaca", "input_ids"});
  one_of("data.bad_lines", r.data.bad_lines, {"error", "skip"});
  one_of("training.device", r.training.device, {"auto", "cpu", "cuda"});
  one_of("training.aux_loss", r.training.aux_loss, {"config", "on", "off"});
  one_of("training.recompute", r.training.recompute, {"none", "experts", "attention", "full"});
  require(!r.training.aux_loss_coef || (*r.training.aux_loss_coef >= 0 && std::isfinite(*r.training.aux_loss_coef)),
          source, "'training.aux_loss_coef' must be config or a number >= 0");
  with_context(source, [&] {
    data::LineMapping(r.data.columns, r.data.roles);  // checked now, so that a bad mapping fails before loading
    data::mixing_from_recipe(r.data.train, r.data.train_weights, {});
  });
  one_of("optimizer.precision", r.optimizer.precision, {"fp32", "fp32_master", "bf16_stochastic_rounding", "pure_bf16"});
  one_of("optimizer.state", r.optimizer.state, {"fp32", "int8"});
  one_of("optimizer.update_in_backward", r.optimizer.update_in_backward, {"auto", "on", "off"});
  one_of("optimizer.lazy_embedding", r.optimizer.lazy_embedding, {"auto", "off"});
  one_of("optimizer.norm_in_backward", r.optimizer.norm_in_backward, {"on", "off"});
  one_of("optimizer.norm_from_expert_gemms", r.optimizer.norm_from_expert_gemms, {"on", "off"});
  one_of("schedule.type", r.schedule.type, {"constant", "linear", "cosine"});
  one_of("lora.quantize", r.lora.quantize, {"none", "nf4"});
  require(r.lora.quantize == "none" || r.lora.settings.enabled() || !r.lora.adapter.empty(), source,
          "'lora.quantize' nf4 (QLoRA) needs LoRA: set lora.rank and lora.target_modules / target_parameters");
  require(r.data.max_length >= 2, source, "'data.max_length' must be at least 2");
  require(r.data.validation_fraction >= 0 && r.data.validation_fraction < 1, source,
          "'data.validation_fraction' must be in [0, 1)");
  require(r.training.micro_batch_size >= 1, source, "'training.micro_batch_size' must be at least 1");
  require(r.training.recompute_keep_layers >= 0, source, "'training.recompute_keep_layers' must not be negative");
  require(r.training.lm_head_chunk_rows >= 0, source, "'training.lm_head_chunk_rows' must not be negative (0: auto)");
  require(r.training.router_bias_update_rate >= 0, source, "'training.router_bias_update_rate' must not be negative");
  require(r.training.gradient_accumulation_steps >= 1, source, "'training.gradient_accumulation_steps' must be at least 1");
  require(r.training.max_steps >= 0, source, "'training.max_steps' must not be negative");
  // Far past any real run, and small enough that the step count cannot overflow.
  require(r.training.epochs > 0 && r.training.epochs <= 1e6, source, "'training.epochs' must be in (0, 1000000]");
  require(r.training.max_nonfinite_steps >= 0, source, "'training.max_nonfinite_steps' must not be negative");
  require(r.optimizer.lr > 0 && std::isfinite(r.optimizer.lr), source, "'optimizer.lr' must be positive");
  require(r.optimizer.beta1 >= 0 && r.optimizer.beta1 < 1, source, "'optimizer.beta1' must be in [0, 1)");
  require(r.optimizer.beta2 >= 0 && r.optimizer.beta2 < 1, source, "'optimizer.beta2' must be in [0, 1)");
  require(r.optimizer.eps > 0 && std::isfinite(r.optimizer.eps), source, "'optimizer.eps' must be positive");
  require(r.optimizer.weight_decay >= 0 && std::isfinite(r.optimizer.weight_decay), source,
          "'optimizer.weight_decay' must not be negative");
  require(r.optimizer.max_grad_norm >= 0 && std::isfinite(r.optimizer.max_grad_norm), source,
          "'optimizer.max_grad_norm' must not be negative (0 disables clipping)");
  require(r.schedule.warmup_steps >= 0, source, "'schedule.warmup_steps' must not be negative");
  // Below 0 the rate turns negative: gradient ascent.
  require(r.schedule.min_lr_ratio >= 0 && r.schedule.min_lr_ratio <= 1, source, "'schedule.min_lr_ratio' must be in [0, 1]");
  require(r.output.save_every >= 0, source, "'output.save_every' must not be negative (0: only at the end)");
  require(r.output.keep_last >= 1, source, "'output.keep_last' must be at least 1");
  require(r.logging.every >= 1, source, "'logging.every' must be at least 1");
  require(r.logging.validation_every >= 0, source, "'logging.validation_every' must not be negative (0: only at the end)");
  require(r.parallel.expert >= 1 && r.parallel.expert <= 1 << 20, source, "'parallel.expert' must be at least 1");
  require(r.parallel.timeout_seconds > 0, source, "'parallel.timeout_seconds' must be positive");
  return r;
}

}  // namespace

Recipe parse_recipe(const std::string& yaml_text, const std::string& source, const std::vector<std::string>& overrides) {
  json recipe = json::parse(kDefaultRecipe);
  KeyLines lines;
  const json given = parse_yaml(yaml_text, source, lines);
  if (!given.is_null()) merge(recipe, given, "", source, lines);
  for (const std::string& assignment : overrides) apply_override(recipe, assignment);
  return to_recipe(recipe, source);
}

Recipe load_recipe(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_recipe("", "defaults", overrides);
  constexpr uint64_t kMaxRecipeBytes = uint64_t(1) << 20;  // a recipe is a page of YAML
  return parse_recipe(io::read_regular_file(path, "the recipe", kMaxRecipeBytes), path.string(), overrides);
}

}  // namespace moetune::train
