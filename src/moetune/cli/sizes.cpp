#include "moetune/cli/sizes.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "moetune/core/error.h"

namespace moetune::cli {

size_t parse_size(const std::string& text, const std::string& what) {
  constexpr double kLargestSize = 9007199254740992.0;  // 2^53 bytes
  static const std::pair<const char*, double> kUnits[] = {
      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},  {"B", 1.0}, {"", 1.0}};
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  std::string unit;
  for (char ch : text.substr(digits))
    if (!std::isspace(static_cast<unsigned char>(ch))) unit += char(std::toupper(static_cast<unsigned char>(ch)));
  if (digits > 0) {
    try {
      double number = std::stod(text.substr(0, digits));
      for (const auto& [name, scale] : kUnits)
        // The upper bound keeps llround defined (it overflows past 2^63); no shard is 9 PB.
        if (unit == name && number * scale >= 1.0 && number * scale <= kLargestSize) return size_t(std::llround(number * scale));
    } catch (const std::exception&) {
    }
  }
  fail("{} '{}' is not a size from 1 byte to 2^53 (examples: 5GB, 500MB, 2GiB, 1048576)", what, text);
}

}  // namespace moetune::cli
