// Errors that say what went wrong and where: every message names the file, tensor or key at fault.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moetune {

// The one exception type the engine throws for bad input or a broken invariant. The message carries the
// context (file, key, tensor, shape); callers that know more context wrap it with `with_context`.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Runs `body`; an Error escaping it is re-thrown with `context` ("file.json: ") in front.
template <typename Body>
decltype(auto) with_context(const std::string& context, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
}

}  // namespace moetune

#define MOETUNE_CHECK(cond, ...)              \
  do {                                        \
    if (!(cond)) ::moetune::fail(__VA_ARGS__); \
  } while (0)
