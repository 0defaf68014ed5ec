#include "moetune/data/chat_spans.h"

#include "moetune/core/error.h"

namespace moetune::data {
namespace {

// Appended to a turn's content to see where the template puts the content's end. A bell character: no closing
// text starts with it, and Python's str.strip() (which templates apply to contents) keeps it.
constexpr const char* kMarker = "\a";

Json with_marked_content(const Json& messages, size_t turn) {
  Json marked = messages;
  Json& content = marked[turn]["content"];
  if (content.is_null()) content = "";
  if (!content.is_string()) fail("message {}: an assistant \"content\" must be a string", turn);
  content = content.get<std::string>() + kMarker;
  return marked;
}

// Where the content of assistant message `turn` ends in render(messages, false) = `rendered`.
size_t content_end(const Json& messages, size_t turn, const RenderChat& render, const std::string& rendered) {
  const size_t end = common_prefix_length(rendered, render(with_marked_content(messages, turn), false));
  if (end == rendered.size()) fail("message {}: the chat template does not render the assistant's content where it can be found", turn);
  return end;
}

Json first(const Json& messages, size_t count) { return Json(std::vector<Json>(messages.begin(), messages.begin() + long(count))); }

}  // namespace

size_t common_prefix_length(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

std::vector<TextSpan> assistant_spans(const Json& messages, const RenderChat& render, const std::string& whole) {
  std::vector<TextSpan> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const size_t begin = common_prefix_length(render(first(messages, i), true), whole);
    const size_t end_of_content = content_end(messages, i, render, whole);
    const Json through = first(messages, i + 1);
    const std::string alone = render(through, false);  // the turn as the last one: its closing text follows
    const std::string_view closing = std::string_view(alone).substr(content_end(through, i, render, alone));
    const size_t end = end_of_content + common_prefix_length(std::string_view(whole).substr(end_of_content), closing);
    if (begin > end_of_content || (!spans.empty() && begin < spans.back().end))
      fail("message {}: the chat template renders the assistant turn where it overlaps the turns before it", i);
    spans.push_back({begin, end});
  }
  return spans;
}

}  // namespace moetune::data
