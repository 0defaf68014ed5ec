#include "moetune/io/config_reader.h"

#include <cmath>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::io {

using nlohmann::json;


const json* ConfigReader::find(const char* key) const {
  auto found = object_.find(key);
  return found == object_.end() || found->is_null() ? nullptr : &*found;
}

int64_t ConfigReader::as_integer(const json& value, const char* key) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float() && std::nearbyint(value.get<double>()) == value.get<double>() &&
      std::fabs(value.get<double>()) < 9.0e15)
    return int64_t(value.get<double>());
  fail("'{}' must be an integer, got {}", key, abbreviated_dump(value));
}

int64_t ConfigReader::integer(const char* key, int64_t fallback) const {
  const json* value = find(key);
  return value ? as_integer(*value, key) : fallback;
}

std::optional<int64_t> ConfigReader::optional_integer(const char* key) const {
  const json* value = find(key);
  return value ? std::optional<int64_t>(as_integer(*value, key)) : std::nullopt;
}

double ConfigReader::number(const char* key, double fallback) const {
  const json* value = find(key);
  return value ? as_number(*value, key) : fallback;
}

double ConfigReader::as_number(const json& value, const char* key) {
  if (value.is_number()) return value.get<double>();
  // transformers 5 writes float('inf') and float('nan') as {"__float__": "Infinity"} (io/json_file.cpp rewrites
  // Python's bare Infinity / NaN so).
  if (value.is_object() && value.size() == 1 && value.contains("__float__") && value["__float__"].is_string()) {
    const std::string word = value["__float__"].get<std::string>();
    if (word == "Infinity") return INFINITY;
    if (word == "-Infinity") return -INFINITY;
    if (word == "NaN") return NAN;
  }
  fail("'{}' must be a number, got {}", key, abbreviated_dump(value));
}

bool ConfigReader::boolean(const char* key, bool fallback) const {
  const json* value = find(key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail("'{}' must be true or false, got {}", key, abbreviated_dump(*value));
  return value->get<bool>();
}

bool ConfigReader::is_null(const char* key) const {
  const auto found = object_.find(key);
  return found != object_.end() && found->is_null();
}

bool ConfigReader::truthy(const char* key, bool fallback) const {
  const auto found = object_.find(key);
  if (found == object_.end()) return fallback;
  return !found->is_null() && boolean(key, fallback);
}

std::string ConfigReader::string(const char* key, const std::string& fallback) const {
  const json* value = find(key);
  if (!value) return fallback;
  if (!value->is_string()) fail("'{}' must be a string, got {}", key, abbreviated_dump(*value));
  return value->get<std::string>();
}

std::vector<int64_t> ConfigReader::integers(const char* key) const {
  const json* value = find(key);
  std::vector<int64_t> result;
  if (!value) return result;
  if (!value->is_array()) return {as_integer(*value, key)};
  for (const json& item : *value) result.push_back(as_integer(item, key));
  return result;
}

std::vector<std::string> ConfigReader::strings(const char* key) const {
  const json* value = find(key);
  std::vector<std::string> result;
  if (!value) return result;
  if (!value->is_array()) fail("'{}' must be a list of strings, got {}", key, abbreviated_dump(*value));
  for (const json& item : *value) {
    if (!item.is_string()) fail("'{}' entries must be strings, got {}", key, abbreviated_dump(item));
    result.push_back(item.get<std::string>());
  }
  return result;
}

}  // namespace moetune::io
