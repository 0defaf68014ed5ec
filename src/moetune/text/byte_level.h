// GPT-2's byte-level alphabet: every byte stands for one printable Unicode character, so that a BPE vocabulary of
// strings covers any byte sequence (space is "Ġ" U+0120, newline "Ċ" U+010A). HF's ByteLevel pre-tokenizer maps
// text bytes to these characters before BPE, and the ByteLevel decoder maps tokens back to bytes.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace moetune::text {

// The character each byte stands for, as UTF-8 (one or two bytes long).
const std::array<std::string, 256>& byte_level_alphabet();

// The characters of `bytes`, each byte mapped.
std::string to_byte_level(std::string_view bytes);

// Appends the bytes a token stands for, as HF's ByteLevel decoder does: a token holding any character outside the
// alphabet (an added token such as "<|im_end|> " with a real space, or one written in CJK) is taken as it is.
void append_byte_level_decoded(std::string_view token, std::string& out);

}  // namespace moetune::text
