#include "moetune/text/metaspace.h"

namespace moetune::text {

void Metaspace::transform(std::string_view piece, bool starts_text, std::string& out) const {
  out.clear();
  for (char c : piece) {
    if (c == ' ')
      out += replacement;
    else
      out += c;
  }
  const bool prefixed = out.compare(0, replacement.size(), replacement) == 0;
  if (!prefixed && (prepend == Prepend::Always || (prepend == Prepend::First && starts_text))) out.insert(0, replacement);
}

}  // namespace moetune::text
