#include "moetune/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/text/utf8.h"

namespace moetune::text {
namespace {

constexpr char32_t kCodePoints = 0x110000;

// Characters NFC leaves alone whatever surrounds them: combining class 0 (nothing reorders across them), no
// decomposition (nothing to recompose), and never the second character of a composition (nothing before them
// combines with them). A string made only of such characters is NFC, and NFC(x + y) = NFC(x) + NFC(y) whenever y
// starts with one, so text can be normalized stretch by stretch, each stretch starting at one of them.
std::vector<bool> build_inert_table() {
  std::vector<bool> inert(kCodePoints, false);
  std::vector<bool> may_be_second(kCodePoints, false);
  // Hangul vowel and trailing jamo compose with what precedes them by rule, not through the decomposition table.
  for (char32_t c = 0x1161; c <= 0x1175; ++c) may_be_second[c] = true;
  for (char32_t c = 0x11A8; c <= 0x11C2; ++c) may_be_second[c] = true;
  utf8proc_int32_t decomposed[32];
  for (char32_t c = 0; c < kCodePoints; ++c) {
    const utf8proc_property_t* property = utf8proc_get_property(utf8proc_int32_t(c));
    if (property->decomp_seqindex == UINT16_MAX || property->decomp_type != 0) continue;  // no canonical mapping
    int last_boundclass = 0;
    const utf8proc_ssize_t count =
        utf8proc_decompose_char(utf8proc_int32_t(c), decomposed, 32, UTF8PROC_DECOMPOSE, &last_boundclass);
    // Whatever follows the first character of a canonical decomposition may compose with what precedes it.
    for (utf8proc_ssize_t i = 1; i < count && i < 32; ++i) may_be_second[size_t(decomposed[i])] = true;
  }
  for (char32_t c = 0; c < kCodePoints; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const utf8proc_property_t* property = utf8proc_get_property(utf8proc_int32_t(c));
    inert[c] = property->combining_class == 0 && property->decomp_seqindex == UINT16_MAX && !may_be_second[c];
  }
  return inert;
}

const std::vector<bool>& inert_table() {
  static const std::vector<bool> table = build_inert_table();
  return table;
}

void append_nfc(std::string_view stretch, std::string& out) {
  utf8proc_uint8_t* normalized = nullptr;
  // utf8proc_NFC's options (STABLE | COMPOSE), with an explicit length so that a NUL byte in the text is kept.
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(stretch.data()), utf8proc_ssize_t(stretch.size()),
                   &normalized, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(length));
  out.append(reinterpret_cast<const char*>(normalized), size_t(length));
  std::free(normalized);
}

}  // namespace

std::string_view nfc(std::string_view text, std::string& storage) {
  size_t pos = 0;
  while (pos < text.size() && uint8_t(text[pos]) < 0x80) ++pos;
  if (pos == text.size()) return text;  // ASCII: the common case, decided without the table

  const std::vector<bool>& inert = inert_table();
  size_t copied = 0;      // text before this offset is in `storage` already
  size_t last_inert = pos > 0 ? pos - 1 : 0;  // where the last inert character before `pos` starts
  bool changed = false;
  while (pos < text.size()) {
    const size_t start = pos;
    if (uint8_t(text[pos]) < 0x80) {  // ASCII is inert; skip it without the table
      last_inert = pos++;
      continue;
    }
    if (inert[utf8::next(text, pos)]) {
      last_inert = start;
      continue;
    }
    // A stretch that NFC may change: from the last inert character (it may compose with what follows) up to the
    // next inert one.
    size_t end = pos;
    while (end < text.size()) {
      size_t after = end;
      if (inert[utf8::next(text, after)]) break;
      end = after;
    }
    if (!changed) storage.clear();
    changed = true;
    storage.append(text.substr(copied, last_inert - copied));
    append_nfc(text.substr(last_inert, end - last_inert), storage);
    copied = end;
    pos = end;
  }
  if (!changed) return text;
  storage.append(text.substr(copied));
  return storage;
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  std::string_view current = text;
  std::string step_storage;  // each step reads the previous result, so it writes elsewhere
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::Nfc: current = nfc(current, step_storage); break;
      case Kind::Prepend:
        if (current.empty()) continue;
        step_storage = step.text + std::string(current);
        current = step_storage;
        break;
      case Kind::Replace: {
        if (current.find(step.text) == std::string_view::npos) continue;
        std::string replaced;
        for (size_t from = 0;;) {
          const size_t at = current.find(step.text, from);
          replaced.append(current.substr(from, at - from));
          if (at == std::string_view::npos) break;
          replaced += step.content;
          from = at + step.text.size();
        }
        step_storage = std::move(replaced);
        current = step_storage;
        break;
      }
    }
    if (current.data() == step_storage.data()) {
      storage.swap(step_storage);
      current = storage;
    }
  }
  return current;
}

}  // namespace moetune::text
