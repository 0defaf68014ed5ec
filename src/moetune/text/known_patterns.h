// Hand-written matchers for the pre-tokenizer regexes the common byte-level BPE models ship: GPT-2's (ByteLevel
// with use_regex), Llama-3's and Qwen2/Qwen3's (Split). The regex engine spends most of its time trying alternatives
// one by one; these decide from one or two characters which alternative applies. They agree with PCRE2 on every
// input (tests/text/test_tokenizer.cpp compares them on random strings); any other pattern runs on PCRE2.
#pragma once

#include <cstddef>
#include <string_view>

namespace moetune::text {

// Where the match that starts at `pos` ends. These patterns match at every position of valid UTF-8 (every character
// is a letter, a number, whitespace or something else, and each kind has an alternative), and never match empty.
using KnownPatternMatcher = size_t (*)(std::string_view text, size_t pos);

// The matcher for `pattern` (a regex, as tokenizer.json writes it), or nullptr when it is not one of the known ones.
KnownPatternMatcher known_pattern_matcher(std::string_view pattern);

}  // namespace moetune::text
