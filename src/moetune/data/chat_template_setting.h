// data.chat_template as a recipe gives it: a file, or the template's text itself.
#pragma once

#include <string>

namespace moetune::data {

// The template's source: the file's contents, or `setting` itself when it is no file but looks like a template
// ("{{" or "{%" in it); else an Error naming the setting.
std::string chat_template_source(const std::string& setting);

}  // namespace moetune::data
