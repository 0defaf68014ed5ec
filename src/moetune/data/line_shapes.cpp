#include "moetune/data/line_shapes.h"

#include <map>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::data {
namespace {

const std::string& string_at(const Json& object, const char* key, const std::string& where) {
  auto found = object.find(key);
  if (found == object.end()) fail("{} has no \"{}\"", where, key);
  if (!found->is_string()) fail("{}: \"{}\" must be a string, got {}", where, key, io::abbreviated_dump(*found));
  return found->get_ref<const std::string&>();
}

Json message(const std::string& role, const std::string& content) { return Json{{"role", role}, {"content", content}}; }

}  // namespace

Json sharegpt_messages(const Json& line) {
  // ShareGPT's speakers as chat templates name them; the template's own names pass unchanged.
  static const std::map<std::string, std::string> kRoles = {{"human", "user"},       {"user", "user"},
                                                            {"gpt", "assistant"},    {"assistant", "assistant"},
                                                            {"system", "system"},    {"tool", "tool"}};
  const auto conversations = line.find("conversations");
  if (conversations == line.end() || !conversations->is_array() || conversations->empty())
    fail("\"conversations\" must be a non-empty list");
  Json messages = Json::array();
  for (size_t i = 0; i < conversations->size(); ++i) {
    const Json& turn = (*conversations)[i];
    const std::string where = fmt::format("conversations[{}]", i);
    if (!turn.is_object()) fail("{} must be an object with \"from\" and \"value\"", where);
    const std::string& from = string_at(turn, "from", where);
    const auto role = kRoles.find(from);
    if (role == kRoles.end()) fail("{}: \"from\" is '{}', not one of: human, gpt, system, user, assistant, tool", where, from);
    messages.push_back(message(role->second, string_at(turn, "value", where)));
  }
  return messages;
}

Json alpaca_messages(const Json& line) {
  const std::string& instruction = string_at(line, "instruction", "the line");
  std::string request = instruction;
  if (line.contains("input") && !line["input"].is_null()) {
    const std::string& input = string_at(line, "input", "the line");
    if (!input.empty()) request += "\n\n" + input;
  }
  return Json::array({message("user", request), message("assistant", string_at(line, "output", "the line"))});
}

}  // namespace moetune::data
