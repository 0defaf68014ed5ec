// The conversation shapes (ShareGPT, Alpaca, TRL's conversational prompt/completion) and multi-turn chat masks
// with a real template (Qwen3's, which drops earlier turns' <think> blocks). One token per byte, so the scored
// text can be written by hand.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/data/example.h"
#include "moetune/data/text_codec.h"
#include "moetune/text/chat_template.h"
#include "test_util.h"

namespace moetune::data {
namespace {

using json = Json;

TextCodec byte_codec(std::shared_ptr<text::ChatTemplate> chat) {
  TextCodec codec;
  codec.encode = [](std::string_view text) { return std::vector<int64_t>(text.begin(), text.end()); };
  codec.eos_id = 1;
  codec.vocab_size = 256;
  codec.render_chat = [chat](const json& messages, bool add_generation_prompt, const json& tools) {
    return chat->apply(messages, add_generation_prompt, tools.is_null() ? json::object() : json{{"tools", tools}});
  };
  return codec;
}

TextCodec qwen3_codec() {
  const auto path = testing::fixture("chat_templates") / "qwen3" / "chat_template.jinja";
  return byte_codec(std::make_shared<text::ChatTemplate>(text::ChatTemplate::from_string(testing::read_file(path))));
}

// The scored bytes, each unscored run of bytes shown as one '.'.
std::string scored_text(const Example& e) {
  std::string out;
  for (size_t i = 0; i < e.ids.size(); ++i) {
    if (e.scored[i]) out += char(e.ids[i]);
    else if (out.empty() || out.back() != '.') out += '.';
  }
  return out;
}

std::string all_text(const Example& e) { return std::string(e.ids.begin(), e.ids.end()); }

Example example(const std::string& line, Format format = Format::Auto, bool loss_on_prompt = false) {
  return make_example(json::parse(line), format, qwen3_codec(), loss_on_prompt);
}

std::string error(const std::string& line, Format format = Format::Auto) {
  try {
    example(line, format);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Qwen3 renders the first answer without its <think> block once a later user turn follows, so the first turn is
// no prefix of the whole; each answer is still scored where the whole rendering has it, through <|im_end|>\n.
TEST(ChatMasks, Qwen3TwoTurnsWithThinkingScoreEachAnswerInTheFullRendering) {
  const Example e = example(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1"},
      {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\na2"}]})");
  EXPECT_EQ(all_text(e),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n");
  EXPECT_EQ(scored_text(e), ".a1<|im_end|>\n.<think>\nr2\n</think>\n\na2<|im_end|>\n");
}

// Every fixture template (Qwen3, Llama 3.1, gpt-oss) scores both answers of a two-turn conversation and no
// user text.
TEST(ChatMasks, EveryFixtureTemplateScoresEachAnswer) {
  for (const char* name : {"qwen3", "llama3_1", "gpt_oss"}) {
    const auto folder = testing::fixture("chat_templates") / name;
    const TextCodec codec = byte_codec(std::make_shared<text::ChatTemplate>(text::ChatTemplate::from_folder(folder)));
    const Example e = make_example(json::parse(R"({"messages": [
        {"role": "user", "content": "QUESTION1"}, {"role": "assistant", "content": "ANSWER1"},
        {"role": "user", "content": "QUESTION2"}, {"role": "assistant", "content": "ANSWER2"}]})"),
                                   Format::Auto, codec, false);
    const std::string scored = scored_text(e);
    EXPECT_NE(scored.find("ANSWER1"), std::string::npos) << name << ": " << scored;
    EXPECT_NE(scored.find("ANSWER2"), std::string::npos) << name << ": " << scored;
    EXPECT_EQ(scored.find("QUESTION"), std::string::npos) << name << ": " << scored;
  }
}

// gpt-oss closes the last answer with <|return|> and earlier ones with <|end|>: the earlier answer's span ends
// with its content, never inside "<|end|>" (tokenized apart, the special token would split).
TEST(ChatMasks, GptOssEarlierAnswersEndBeforeADifferentClosingToken) {
  const TextCodec codec = byte_codec(std::make_shared<text::ChatTemplate>(
      text::ChatTemplate::from_folder(testing::fixture("chat_templates") / "gpt_oss")));
  const Example e = make_example(json::parse(R"({"messages": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
      {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})"), Format::Auto, codec, false);
  EXPECT_EQ(scored_text(e), ".<|channel|>final<|message|>A1.<|channel|>final<|message|>A2<|return|>");
}

// Contents as lists of parts (as multimodal datasets write them) are found through their last text part.
TEST(ChatMasks, ContentAsAListOfPartsIsFound) {
  const TextCodec codec = byte_codec(std::make_shared<text::ChatTemplate>(text::ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{% for p in m.content %}{{ p.text }}{% endfor %}|{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}")));
  const Example e = make_example(json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "y"}, {"type": "text", "text": "o"}]}]})"),
                                 Format::Auto, codec, false);
  EXPECT_EQ(scored_text(e), ".yo|");
}

TEST(ChatMasks, Qwen3ToolCallTurnsAreScoredWithTheirCalls) {
  const Example e = example(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "w", "arguments": {"c": "P"}}}]},
      {"role": "tool", "content": "sun"}, {"role": "assistant", "content": "Sunny."}]})");
  EXPECT_EQ(scored_text(e),
            ".<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call><|im_end|>\n."
            "<think>\n\n</think>\n\nSunny.<|im_end|>\n");
}

// With enable_thinking false Qwen3's generation prompt holds an empty <think> block that earlier turns of the
// history do not: the first answer starts where the lines agree, not inside its first "<".
TEST(ChatMasks, Qwen3WithoutThinkingStartsEachAnswerAtALineBoundary) {
  const auto path = testing::fixture("chat_templates") / "qwen3" / "chat_template.jinja";
  const auto chat = std::make_shared<text::ChatTemplate>(text::ChatTemplate::from_string(testing::read_file(path)));
  TextCodec codec = byte_codec(chat);
  codec.render_chat = [chat](const json& messages, bool add_generation_prompt, const json&) {
    return chat->apply(messages, add_generation_prompt, {{"enable_thinking", false}});
  };
  const Example e = make_example(json::parse(R"({"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<b>a1</b>"},
      {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]})"), Format::Auto, codec, false);
  EXPECT_EQ(scored_text(e), ".<b>a1</b><|im_end|>\n.a2<|im_end|>\n");
}

// A line's "tools" reach the template (Qwen3 lists them in a system block), in every rendering the masks use.
TEST(ChatMasks, ALinesToolsReachTheTemplate) {
  const Example e = example(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                "tools": [{"type": "function", "function": {"name": "w"}}]})");
  EXPECT_NE(all_text(e).find("# Tools"), std::string::npos) << all_text(e);
  EXPECT_EQ(scored_text(e), ".<think>\n\n</think>\n\nyo<|im_end|>\n");
}

// data.chat_template (a file or the text) replaces the model's template; data.chat_template_kwargs are variables
// of every rendering, beside the line's tools.
TEST(ChatSettings, ARecipesTemplateAndKwargsReplaceTheModels) {
  const std::filesystem::path model = std::filesystem::path(MOETUNE_FIXTURES_DIR) / "../../assets/default/model";
  const std::string source = "{{ greeting }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ tools | length }}";
  const json messages = json::parse(R"([{"role": "user", "content": "x"}])");
  ModelText text = load_model_text(model, {source, {{"greeting", "hi"}}});
  EXPECT_EQ(text.codec.render_chat(messages, false, json::array({1, 2})), "hi<user>x2");
  testing::ScratchDir dir;
  testing::write_file(dir / "t.jinja", source);
  text = load_model_text(model, {(dir / "t.jinja").string(), {{"greeting", "yo"}}});
  EXPECT_EQ(text.codec.render_chat(messages, false, json::array({1})), "yo<user>x1");
  try {
    load_model_text(model, {(dir / "missing.jinja").string()});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is neither a file nor template text"), std::string::npos) << e.what();
  }
}

TEST(LineShapes, ShareGptIsScoredAsTheSameMessages) {
  const Example sharegpt = example(R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "hi"},
                                                         {"from": "gpt", "value": "yo"}]})");
  const Example messages = example(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": "yo"}]})");
  EXPECT_EQ(sharegpt.ids, messages.ids);
  EXPECT_EQ(sharegpt.scored, messages.scored);
  EXPECT_EQ(scored_text(sharegpt), ".<think>\n\n</think>\n\nyo<|im_end|>\n");
  EXPECT_NE(error(R"({"conversations": [{"from": "bot", "value": "x"}]})").find("\"from\" is 'bot'"), std::string::npos);
  EXPECT_NE(error(R"({"conversations": [{"from": "gpt"}]})").find("conversations[0] has no \"value\""), std::string::npos);
}

TEST(LineShapes, AlpacaIsAUserTurnOfInstructionAndInputAndAnAssistantTurnOfOutput) {
  const Example e = example(R"({"instruction": "Add.", "input": "2+2", "output": "4"})");
  EXPECT_EQ(all_text(e), "<|im_start|>user\nAdd.\n\n2+2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n");
  EXPECT_EQ(scored_text(e), ".<think>\n\n</think>\n\n4<|im_end|>\n");
  EXPECT_EQ(all_text(example(R"({"instruction": "Hi.", "input": "", "output": "4"})")).find("Hi.<|im_end|>"), 17u);
  EXPECT_NE(error(R"({"instruction": "x", "output": 3})").find("\"output\" must be a string"), std::string::npos);
}

TEST(LineShapes, ConversationalPromptCompletionScoresEverythingAfterThePrompt) {
  const Example e = example(R"({"prompt": [{"role": "user", "content": "2+2?"}],
                                "completion": [{"role": "assistant", "content": "4"}]})");
  EXPECT_EQ(all_text(e), "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n");
  EXPECT_EQ(scored_text(e), ".<think>\n\n</think>\n\n4<|im_end|>\n");
  const Example all = example(R"({"prompt": [{"role": "user", "content": "2+2?"}],
                                  "completion": [{"role": "assistant", "content": "4"}]})", Format::Auto, true);
  EXPECT_EQ(scored_text(all), all_text(all));
  EXPECT_NE(error(R"({"prompt": [{"role": "user", "content": "a"}]})").find("\"completion\" must be a non-empty list"),
            std::string::npos);
}

TEST(LineShapes, ForcedFormatsAndUnknownShapesSayWhatTheySaw) {
  EXPECT_EQ(format_from_name("sharegpt"), Format::ShareGpt);
  EXPECT_EQ(format_from_name("alpaca"), Format::Alpaca);
  EXPECT_NE(error(R"({"question": "a", "answer": "b"})").find("its keys are \"question\", \"answer\""), std::string::npos);
  EXPECT_NE(error(R"({"text": "a"})", Format::Alpaca).find("has no \"instruction\""), std::string::npos);
}

}  // namespace
}  // namespace moetune::data
