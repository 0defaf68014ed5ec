// Unicode NFC, the normalizer of Qwen2/Qwen3 tokenizers, through utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace moetune::text {

// `text` in NFC. Most text is NFC already (all of ASCII is), so only the stretches around characters that NFC could
// change go through utf8proc; the result is `text` itself when nothing changes, else it lives in `storage`.
// `text` must be valid UTF-8.
std::string_view nfc(std::string_view text, std::string& storage);

}  // namespace moetune::text
