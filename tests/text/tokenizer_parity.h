// What the tokenizer parity tests share: the fixture files' [JSON pointer, value] edits, and the comparison of a
// tokenizer with one tokenizer's results in a cases file made by tests/reference/make_*tokenizer*_fixtures.py.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moetune/text/tokenizer.h"

namespace moetune::text::parity {

inline nlohmann::json with_edits(nlohmann::json spec, const nlohmann::json& edits) {
  for (const nlohmann::json& edit : edits) spec[nlohmann::json::json_pointer(edit[0].get<std::string>())] = edit[1];
  return spec;
}

// Every text must encode to HF's ids (without and with the post_processor's tokens) and decode to HF's text.
inline void expect_hf_parity(const Tokenizer& tokenizer, const nlohmann::json& texts, const nlohmann::json& expected) {
  ASSERT_EQ(texts.size(), expected.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i];
    const auto ids = expected[i]["ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE("case " + std::to_string(i) + ": " + nlohmann::json(text).dump());
    EXPECT_EQ(tokenizer.encode(text), ids);
    EXPECT_EQ(tokenizer.encode_with_special_tokens(text), expected[i]["ids_with_special_tokens"].get<std::vector<int32_t>>());
    EXPECT_EQ(tokenizer.decode(ids), expected[i]["decoded"].get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/true), expected[i]["decoded_skip_special"].get<std::string>());
  }
}

}  // namespace moetune::text::parity
