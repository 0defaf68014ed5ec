#include "moetune/data/chat_template_setting.h"

#include <filesystem>

#include "moetune/core/error.h"
#include "moetune/io/regular_file.h"

namespace moetune::data {

std::string chat_template_source(const std::string& setting) {
  constexpr uint64_t kMaxTemplateBytes = uint64_t(16) << 20;
  if (std::filesystem::is_regular_file(setting)) return io::read_regular_file(setting, "the chat template", kMaxTemplateBytes);
  if (setting.find("{{") == std::string::npos && setting.find("{%") == std::string::npos)
    fail("data.chat_template: '{}' is neither a file nor template text", setting);
  return setting;
}

}  // namespace moetune::data
