// Data sets that spell the known line shapes with other names: the recipe's data.columns maps a shape's key to the
// key the lines use ({"messages": "chat", "prompt": "question", "completion": "answer", "role": "speaker",
// "content": "text"}), data.roles maps the lines' role names to the template's ({"human": "user", "bot":
// "assistant"}). Each line is renamed before its shape is detected, so it then reads as a known shape.
#pragma once

#include <map>
#include <string>

#include "moetune/data/example.h"

namespace moetune::data {

class LineMapping {
 public:
  LineMapping() = default;
  // `columns`: {shape key: line key}; `roles`: {line role: template role}. Both JSON objects of strings; an unknown
  // shape key or a non-string value is an Error naming data.columns / data.roles and the key.
  LineMapping(const nlohmann::json& columns, const nlohmann::json& roles);

  bool empty() const { return columns_.empty() && roles_.empty(); }
  // The line with its keys renamed (top level: the shape keys; inside messages, prompt and completion lists and
  // ShareGPT's conversations: role and content) and its roles mapped (a message's "role", a ShareGPT turn's "from").
  Json apply(const Json& line) const;

 private:
  Json rename_message(const Json& message) const;

  std::map<std::string, std::string> columns_;  // line key -> shape key
  std::map<std::string, std::string> roles_;    // line role -> template role
};

}  // namespace moetune::data
