#define PCRE2_CODE_UNIT_WIDTH 8
#include "moetune/text/pre_tokenizer.h"

#include <pcre2.h>

#include "moetune/core/error.h"

namespace moetune::text {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(code, buffer, sizeof buffer);
  return length < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
}

// One match-data block per thread, enough for the whole-match offsets; callers copy them out before matching again.
pcre2_match_data* thread_match_data() {
  struct Deleter {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
  };
  thread_local std::unique_ptr<pcre2_match_data, Deleter> data(pcre2_match_data_create(1, nullptr));
  return data.get();
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, Engine engine) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // PCRE2 refuses UCP with LITERAL
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                   &offset, nullptr);
  if (!code) fail("the pattern does not compile at offset {}: {}", offset, pcre2_message(error));
  code_.reset(code, pcre2_code_free);
  // Without JIT (a build of PCRE2 without it) the interpreter gives the same matches, only slower.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  if (!literal && engine == Engine::Fastest) known_ = known_pattern_matcher(pattern);
}

size_t Regex::find(std::string_view text, size_t from, size_t& end) const {
  if (known_) {  // a match starts at every position
    if (from >= text.size()) return std::string_view::npos;
    end = known_(text, from);
    return from;
  }
  pcre2_match_data* data = thread_match_data();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int result = PCRE2_ERROR_JIT_STACKLIMIT;
  if (jit_) result = pcre2_jit_match(code_.get(), subject, text.size(), from, 0, data, nullptr);
  // The interpreter when there is no JIT code or the JIT ran out of its stack (it keeps its own on the heap).
  if (result == PCRE2_ERROR_JIT_STACKLIMIT)
    result = pcre2_match(code_.get(), subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, nullptr);
  if (result == PCRE2_ERROR_NOMATCH) return std::string_view::npos;
  if (result < 0) fail("pre-tokenizer regex: matching failed: {}", pcre2_message(result));
  const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(data);
  end = offsets[1];
  return offsets[0];
}

void PreTokenizer::add_split(std::string_view pattern, bool literal) {
  stages_.push_back({std::make_shared<const Regex>(pattern, literal), false});
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  static const auto gpt2 = std::make_shared<const Regex>(kGpt2Pattern, false);
  if (!use_regex && !add_prefix_space) return;  // passes pieces on unchanged (Qwen's, Llama-3's): no stage needed
  stages_.push_back({use_regex ? gpt2 : nullptr, add_prefix_space});
}

}  // namespace moetune::text
