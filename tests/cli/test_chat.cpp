// `moetune chat` as a user meets it: turns from stdin, the conversation kept and rendered whole with the chat
// template each turn, "/reset" starting afresh; a model that cannot chat is an error that says what to use.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "moetune/cli/chat.h"
#include "moetune/cli/generate.h"
#include "moetune/core/error.h"
#include "moetune/model/causal_lm.h"
#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

const fs::path kChatModel = fs::path(MOETUNE_FIXTURES_DIR) / ".." / ".." / "assets" / "default" / "model";

TEST(Chat, KeepsTheConversationAndRendersItWholeEachTurn) {
  const model::GenerateOptions options{.max_new_tokens = 6};
  const std::string first = "Which is larger, 47 or 52?", second = "And 3 or 9?";
  // What each turn must answer: the model's reply to the whole conversation so far.
  const data::ModelText text = data::load_model_text(kChatModel);
  model::CausalLM model = model::CausalLM::from_pretrained(kChatModel);
  data::Json messages = data::Json::array({{{"role", "user"}, {"content", first}}});
  const std::string reply1 = cli::reply_text(model, text, text.codec.render_chat(messages, true, data::Json()), options);
  messages.push_back({{"role", "assistant"}, {"content", reply1}});
  messages.push_back({{"role", "user"}, {"content", second}});
  const std::string reply2 = cli::reply_text(model, text, text.codec.render_chat(messages, true, data::Json()), options);

  std::istringstream in(first + "\n\n/reset\n" + first + "\n" + second + "\n");
  std::ostringstream out;
  cli::run_chat({.model = kChatModel, .options = options, .device = "cpu"}, in, out, nullptr);
  EXPECT_EQ(out.str(), reply1 + "\n" + reply1 + "\n" + reply2 + "\n");

  const testing::RunResult piped = testing::run_shell("printf '" + first + "\\n" + second + "\\n' | " + MOETUNE_BINARY +
                                                      " chat " + kChatModel.string() + " --max-new-tokens 6 --device cpu");
  ASSERT_EQ(piped.status, 0) << piped.output;
  EXPECT_EQ(piped.output, reply1 + "\n" + reply2 + "\n");
}

TEST(Chat, AModelWithoutTokenizerIsNamed) {
  const testing::RunResult result =
      testing::run_shell("echo hello | " + std::string(MOETUNE_BINARY) + " chat " + testing::fixture("qwen3_moe_tiny").string());
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_NE(result.output.find("qwen3_moe_tiny: no tokenizer.json"), std::string::npos) << result.output;
}

TEST(Generate, DeviceAndSpeedFlags) {
  const testing::RunResult run = testing::run_moetune("generate " + kChatModel.string() +
                                                      " --prompt 'Which is larger, 47 or 52?' --chat --max-new-tokens 4 "
                                                      "--device cpu --speed");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("prefill: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("tokens/s (cpu)"), std::string::npos) << run.output;
  const testing::RunResult wrong = testing::run_moetune("generate " + kChatModel.string() + " --prompt hi --device tpu");
  EXPECT_EQ(wrong.status, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("expected auto, cpu or cuda"), std::string::npos) << wrong.output;
}

// A model the GPU engine does not run (a router over more than 512 experts) is refused for generation on cuda,
// naming what is missing, before anything is loaded: its folder holds config.json alone (so this holds on a
// machine without a GPU too).
TEST(Generate, WhatTheGpuDoesNotRunGeneratesOnTheCpuOnly) {
  const testing::ScratchDir scratch;
  nlohmann::json config = nlohmann::json::parse(testing::read_file(testing::fixture("qwen3_moe_tiny") / "config.json"));
  config["num_experts"] = config["num_local_experts"] = 600;  // the fixture spells it num_local_experts
  std::filesystem::create_directories(scratch / "model");
  testing::write_file(scratch / "model" / "config.json", config.dump());
  try {
    cli::load_generation_model(scratch / "model", "cuda");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 512 experts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune
