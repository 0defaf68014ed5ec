// Python's str semantics on UTF-8 text, for the chat-template renderer: a template's output has to match what
// transformers' Jinja (running on Python strings) renders byte for byte, so lengths, indices and slices count code
// points, strip()/split() know Unicode whitespace, and repr()/float repr are Python's.
//
// Bytes that are not valid UTF-8 survive every operation unchanged: they decode to the lone surrogates
// U+DC80..U+DCFF (Python's "surrogateescape") and encode back to the same byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetune::text::py {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
void append_code_point(std::string& out, char32_t code_point);

// len(s): the number of code points.
size_t length(std::string_view text);
bool is_ascii(std::string_view text);

// str.isspace() for one character: the Unicode White_Space set plus the ASCII separators U+001C..U+001F.
bool is_space(char32_t c);

// s.strip(chars), s.lstrip(chars), s.rstrip(chars); no `chars` strips whitespace.
std::string strip(std::string_view text, const std::optional<std::string>& chars = std::nullopt, bool left = true,
                  bool right = true);
// s.split(sep, maxsplit) and s.rsplit(sep, maxsplit); no `sep` splits on runs of whitespace; maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view text, const std::optional<std::string>& separator,
                               int64_t max_split = -1);
std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& separator,
                                int64_t max_split = -1);
std::vector<std::string> splitlines(std::string_view text, bool keep_ends = false);
// s.replace(old, new, count); count < 0: every occurrence.
std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count = -1);
// s.find(sub) / s.rfind(sub) as a code-point index, -1 when absent; s.count(sub).
int64_t find(std::string_view text, std::string_view sub);
int64_t rfind(std::string_view text, std::string_view sub);
int64_t count(std::string_view text, std::string_view sub);

std::string upper(std::string_view text);
std::string lower(std::string_view text);
std::string title(std::string_view text);       // str.title(): a letter after a cased letter is lowered
std::string capitalize(std::string_view text);  // str.capitalize(): first character title-cased, the rest lowered
bool is_cased_letter(char32_t c);
// str.islower() / str.isupper(): some cased character, and none of the other case (nor title case).
bool is_lower(std::string_view text);
bool is_upper(std::string_view text);

// repr(s): quoted with ' (or " when only ' occurs), escaping what Python escapes.
std::string repr(std::string_view text);
// repr(x) / str(x) of a float: the shortest digits that read back to x, as "1.0", "0.1", "1e+16", "1.5e-05".
std::string float_repr(double value);

// Python's slice semantics, resolved to the indices a slice visits: negative indices count from the end, missing
// bounds default by the step's sign, and out-of-range bounds clamp. A zero step is an Error.
std::vector<size_t> slice_indices(size_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  std::optional<int64_t> step);

}  // namespace moetune::text::py
