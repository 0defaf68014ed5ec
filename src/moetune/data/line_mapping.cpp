#include "moetune/data/line_mapping.h"

#include <algorithm>
#include <array>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::data {
namespace {

// The keys of the known shapes (example.h) that a data set may spell otherwise; role and content name a message's
// fields, "from" and "value" a ShareGPT turn's.
constexpr std::array<const char*, 14> kShapeKeys = {"text",   "prompt",    "completion", "messages", "conversations",
                                                    "instruction", "input", "output",     "input_ids", "tools",
                                                    "role",   "content",   "from",       "value"};
// Keys that hold lists of messages (or ShareGPT turns), whose fields are renamed too.
constexpr std::array<const char*, 4> kMessageLists = {"messages", "prompt", "completion", "conversations"};

bool is_message_field(const std::string& shape_key) {
  return shape_key == "role" || shape_key == "content" || shape_key == "from" || shape_key == "value";
}

std::map<std::string, std::string> string_map(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) fail("{} must be a mapping, got {}", key, io::abbreviated_dump(object));
  std::map<std::string, std::string> map;
  for (const auto& [name, value] : object.items()) {
    if (!value.is_string() || value.get<std::string>().empty())
      fail("{}.{} must be a non-empty string, got {}", key, name, io::abbreviated_dump(value));
    map[name] = value.get<std::string>();
  }
  return map;
}

}  // namespace

LineMapping::LineMapping(const nlohmann::json& columns, const nlohmann::json& roles) : roles_(string_map(roles, "data.roles")) {
  std::map<std::string, std::string> line_keys;  // shape key -> line key, checked
  for (const auto& [shape_key, line_key] : string_map(columns, "data.columns")) {
    if (std::find_if(kShapeKeys.begin(), kShapeKeys.end(), [&](const char* k) { return shape_key == k; }) == kShapeKeys.end()) {
      std::string known;
      for (const char* k : kShapeKeys) known += (known.empty() ? "" : ", ") + std::string(k);
      fail("data.columns.{}: not a key of a known line shape (known: {})", shape_key, known);
    }
    for (const auto& [other_line_key, other_shape_key] : columns_)
      if (other_line_key == line_key) fail("data.columns: both {} and {} read the key '{}'", other_shape_key, shape_key, line_key);
    columns_[line_key] = shape_key;
  }
}

Json LineMapping::rename_message(const Json& message) const {
  if (!message.is_object()) return message;  // make_example says what is wrong with it
  Json renamed = Json::object();
  for (auto it = message.begin(); it != message.end(); ++it) {
    auto column = columns_.find(it.key());
    const bool mapped = column != columns_.end() && is_message_field(column->second);
    const std::string key = mapped ? column->second : it.key();
    Json value = it.value();
    if ((key == "role" || key == "from") && value.is_string()) {
      auto role = roles_.find(value.get<std::string>());
      if (role != roles_.end()) value = role->second;
    }
    if (renamed.contains(key)) fail("a message has \"{}\" both as it is and through data.columns", key);
    renamed[key] = std::move(value);
  }
  return renamed;
}

Json LineMapping::apply(const Json& line) const {
  if (empty() || !line.is_object()) return line;
  Json renamed = Json::object();
  for (auto it = line.begin(); it != line.end(); ++it) {
    auto column = columns_.find(it.key());
    const bool mapped = column != columns_.end() && !is_message_field(column->second);
    const std::string key = mapped ? column->second : it.key();
    if (renamed.contains(key)) fail("the line has \"{}\" both as it is and through data.columns", key);
    renamed[key] = it.value();
  }
  for (const char* list_key : kMessageLists) {
    auto list = renamed.find(list_key);
    if (list == renamed.end() || !list->is_array()) continue;
    for (Json& message : *list) message = rename_message(message);
  }
  return renamed;
}

}  // namespace moetune::data
