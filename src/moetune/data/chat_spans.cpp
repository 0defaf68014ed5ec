#include "moetune/data/chat_spans.h"

#include "moetune/core/error.h"

namespace moetune::data {
namespace {

size_t common_prefix_length(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Appended to a turn's content to see where the template puts the content's end. A bell character: no closing
// text starts with it, and Python's str.strip() (which templates apply to contents) keeps it.
constexpr const char* kMarker = "\a";

// The messages with the marker at the end of message `turn`'s content: a string, null (a turn of tool calls
// only), or a list of parts whose last one is {"type": "text", "text": ...}.
Json with_marked_content(const Json& messages, size_t turn) {
  Json marked = messages;
  Json* text = &marked[turn]["content"];
  if (text->is_null()) *text = "";
  if (text->is_array() && !text->empty() && text->back().is_object() && text->back().contains("text"))
    text = &text->back()["text"];
  if (!text->is_string())
    fail("message {}: an assistant \"content\" must be a string, or a list of parts ending in a text part", turn);
  *text = text->get<std::string>() + kMarker;
  return marked;
}

// Where the content of assistant message `turn` ends in render(messages, false) = `rendered`.
size_t content_end(const Json& messages, size_t turn, const RenderChat& render, const std::string& rendered) {
  const size_t end = common_prefix_length(rendered, render(with_marked_content(messages, turn), false));
  if (end == rendered.size()) fail("message {}: the chat template does not render the assistant's content where it can be found", turn);
  return end;
}

Json first(const Json& messages, size_t count) { return Json(std::vector<Json>(messages.begin(), messages.begin() + long(count))); }

// How much of `closing` (the text after the turn's content when the turn is the last) `after` (the text after it
// in the whole rendering) begins with: all of it, or else its whole lines, or else nothing. A partial match
// could end inside a special token (gpt-oss closes the last answer with <|return|> and earlier ones with <|end|>:
// they share "<|"), and tokenizing the pieces apart would split that token.
size_t closing_in_whole(std::string_view after, std::string_view closing) {
  const size_t shared = common_prefix_length(after, closing);
  if (shared == closing.size()) return shared;
  const size_t line_end = closing.substr(0, shared).rfind('\n');
  return line_end == std::string_view::npos ? 0 : line_end + 1;
}

}  // namespace

// How far `whole` begins with `head` (the conversation before a turn with its generation prompt): all of it, or
// else up to the last line break they share. A generation prompt that differs from the rendering of a turn in
// the history (Qwen3's with enable_thinking false adds an empty <think> block) shares no partial piece of it then:
// "<think>" and an answer starting with "<b>" share "<", which would start the answer inside a token.
size_t generation_prompt_end(std::string_view head, std::string_view whole) {
  const size_t shared = common_prefix_length(head, whole);
  if (shared == head.size()) return shared;
  const size_t line_end = head.substr(0, shared).rfind('\n');
  return line_end == std::string_view::npos ? shared : line_end + 1;
}

std::vector<TextSpan> assistant_spans(const Json& messages, const RenderChat& render, const std::string& whole) {
  std::vector<TextSpan> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const size_t begin = generation_prompt_end(render(first(messages, i), true), whole);
    const size_t end_of_content = content_end(messages, i, render, whole);
    const Json through = first(messages, i + 1);
    const std::string alone = render(through, false);  // the turn as the last one: its closing text follows
    const std::string_view closing = std::string_view(alone).substr(content_end(through, i, render, alone));
    const size_t end = end_of_content + closing_in_whole(std::string_view(whole).substr(end_of_content), closing);
    if (begin > end_of_content || (!spans.empty() && begin < spans.back().end))
      fail("message {}: the chat template renders the assistant turn where it overlaps the turns before it", i);
    spans.push_back({begin, end});
  }
  return spans;
}

}  // namespace moetune::data
