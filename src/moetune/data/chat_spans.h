// Where the assistant turns lie in one rendering of a whole conversation, for templates that do not render a
// conversation as an extension of its shorter prefixes (Qwen3's drops earlier turns' <think> blocks, so the
// turn rendered as the last one differs from the same turn rendered before a later user message).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "moetune/data/example.h"

namespace moetune::data {

// [begin, end) in bytes of a rendering.
struct TextSpan {
  size_t begin = 0, end = 0;
};

// The rendering function of TextCodec::render_chat.
using RenderChat = std::function<std::string(const Json&, bool)>;

// The span of each assistant message of `messages` in `whole` (= render(messages, false)), in order: from the end
// of the generation prompt the template writes before the turn to the end of the turn's closing text (such as
// "<|im_end|>\n"). Each span is found by rendering variants of the conversation and comparing them with `whole`:
//  - begin: the end of render(messages before the turn, add_generation_prompt) when `whole` begins with it, else
//    the last line break up to which they agree;
//  - where the turn's content ends: how far `whole` agrees with the rendering in which only this turn's content
//    has a control character appended (the first byte that differs is where the content ends, whatever the
//    template did to the content before it, e.g. dropping a <think> block);
//  - end: the content's end plus the closing text the template writes after the turn when it is the last one,
//    when `whole` has that text there (else its whole lines that `whole` has, else none: a partial match could
//    end inside a special token).
// It is safe because every position is read from the one full rendering that is tokenized: no piece comes from
// another rendering. A template that hides the appended character (so the turn cannot be found), or spans that
// overlap, are an Error.
std::vector<TextSpan> assistant_spans(const Json& messages, const RenderChat& render, const std::string& whole);

// Where the assistant's text starts in `whole`, given `head`: the conversation before the turn rendered with the
// generation prompt. The end of `head` when `whole` begins with it, else the last line break up to which they
// agree (a generation prompt that differs from the history's turns shares no partial token with them).
size_t generation_prompt_end(std::string_view head, std::string_view whole);

}  // namespace moetune::data
