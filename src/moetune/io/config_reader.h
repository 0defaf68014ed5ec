// Typed reads of a JSON object's keys (config.json and its nested dicts). A missing key or null gives the
// caller's default, as transformers does; a value of the wrong type is an error naming the key. The reader
// only reads JSON: what the values mean is the model family's business (model/families/).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moetune::io {

class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& object) : object_(object) {}

  const nlohmann::json* find(const char* key) const;  // null when absent or null
  bool has(const char* key) const { return find(key) != nullptr; }
  // Written as an explicit null (Python's None), which several config classes read apart from an absent key.
  bool is_null(const char* key) const;
  int64_t integer(const char* key, int64_t fallback) const;
  std::optional<int64_t> optional_integer(const char* key) const;
  double number(const char* key, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  // A `bool | None` field that Python tests for truth: absent gives `fallback`, an explicit null false.
  bool truthy(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  std::vector<int64_t> integers(const char* key) const;     // an integer or a list of them
  std::vector<std::string> strings(const char* key) const;  // a list of strings

  const nlohmann::json& object() const { return object_; }  // the whole object as read

  // 2048.0 is written by some tools; a float is accepted only when it is a whole number.
  static int64_t as_integer(const nlohmann::json& value, const char* key);
  // A number, or transformers 5's {"__float__": "Infinity" | "-Infinity" | "NaN"}; `key` names it in the error.
  static double as_number(const nlohmann::json& value, const char* key);

 private:
  const nlohmann::json& object_;
};

}  // namespace moetune::io
