// Recipe keys that reach the engine and the loader: training.aux_loss_coef and training.freeze (CPU engine),
// data.columns / data.roles (other spellings of the line shapes) and data.train_weights (mixing several sources,
// with an exact resume).
#include <gtest/gtest.h>

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/data/line_mapping.h"
#include "moetune/data/loader.h"
#include "moetune/data/mixing.h"
#include "moetune/train/engine.h"
#include "moetune/train/trainer.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune::train {
namespace {

using nlohmann::json;
using testing::TrainerTest;

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    parse_recipe("", "recipe.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RecipeTrainingKeys, DefaultsAndChecks) {
  const Recipe defaults = parse_recipe("", "recipe.yaml");
  EXPECT_FALSE(defaults.training.aux_loss_coef.has_value());
  EXPECT_EQ(defaults.json["training"]["aux_loss_coef"], "config");
  EXPECT_EQ(defaults.json["training"]["freeze"], json::array());
  for (const char* key : {"columns", "roles", "train_weights"}) EXPECT_EQ(defaults.json["data"][key], json::object()) << key;
  EXPECT_DOUBLE_EQ(*parse_recipe("", "r", {"training.aux_loss_coef=0.02"}).training.aux_loss_coef, 0.02);
  EXPECT_EQ(parse_recipe("", "r", {"training.freeze=[embed_tokens, 'layers.*.moe.router']"}).training.freeze,
            (std::vector<std::string>{"embed_tokens", "layers.*.moe.router"}));
  EXPECT_NE(error_of({"training.aux_loss_coef=-1"}).find("'training.aux_loss_coef' must be config or a number >= 0"), std::string::npos);
  EXPECT_NE(error_of({"training.aux_loss_coef=sometimes"}).find("training.aux_loss_coef"), std::string::npos);
  EXPECT_NE(error_of({"training.freeze=[1]"}).find("'training.freeze' must list strings"), std::string::npos);
  EXPECT_NE(error_of({"data.columns={answer: out}"}).find("recipe.yaml: data.columns.answer: not a key of a known line shape"),
            std::string::npos);
  EXPECT_NE(error_of({"data.roles={bot: 1}"}).find("data.roles.bot must be a non-empty string"), std::string::npos);
  EXPECT_NE(error_of({"data.train=[a.jsonl, b.jsonl]", "data.train_weights={a.jsonl: 1}"})
                .find("data.train_weights: no weight for the data.train entry 'b.jsonl'"),
            std::string::npos);
  EXPECT_NE(error_of({"data.train=[a.jsonl]", "data.train_weights={a.jsonl: 1, c.jsonl: 2}"})
                .find("data.train_weights.c.jsonl: not an entry of data.train"),
            std::string::npos);
  EXPECT_NE(error_of({"data.train=[a.jsonl]", "data.train_weights={a.jsonl: -2}"}).find("expected a number >= 0"),
            std::string::npos);
}

TEST(RecipeTrainingKeys, LazyEmbeddingSetting) {
  // auto by default since its GPU tests (tests/gpu/test_lazy_embedding_gpu.cpp) passed.
  EXPECT_EQ(parse_recipe("", "recipe.yaml").optimizer.lazy_embedding, "auto");
  EXPECT_EQ(parse_recipe("", "recipe.yaml").json["optimizer"]["lazy_embedding"], "auto");
  EXPECT_EQ(parse_recipe("", "r", {"optimizer.lazy_embedding=off"}).optimizer.lazy_embedding, "off");
  EXPECT_NE(error_of({"optimizer.lazy_embedding=on"}).find("optimizer.lazy_embedding"), std::string::npos);
  // Off by default: measured slower on Moonlight (recipe.h).
  EXPECT_EQ(parse_recipe("", "recipe.yaml").optimizer.norm_in_backward, "off");
  EXPECT_EQ(parse_recipe("", "r", {"optimizer.norm_in_backward=on"}).optimizer.norm_in_backward, "on");
  EXPECT_NE(error_of({"optimizer.norm_in_backward=auto"}).find("optimizer.norm_in_backward"), std::string::npos);
  EXPECT_EQ(parse_recipe("", "r", {}).optimizer.norm_from_expert_gemms, "on");
  EXPECT_EQ(parse_recipe("", "r", {"optimizer.norm_from_expert_gemms=off"}).optimizer.norm_from_expert_gemms, "off");
  EXPECT_NE(error_of({"optimizer.norm_from_expert_gemms=auto"}).find("optimizer.norm_from_expert_gemms"), std::string::npos);
}

TEST(RecipeTrainingKeys, RecomputeAndAutoMicroBatch) {
  const Recipe defaults = parse_recipe("", "recipe.yaml");
  EXPECT_EQ(defaults.training.recompute, "none");
  EXPECT_FALSE(defaults.training.micro_batch_auto);
  const Recipe automatic = parse_recipe("", "r", {"training.micro_batch_size=auto", "training.recompute=experts"});
  EXPECT_TRUE(automatic.training.micro_batch_auto);
  EXPECT_EQ(automatic.training.recompute, "experts");
  EXPECT_EQ(parse_recipe("", "r", {"training.micro_batch_size=3"}).training.micro_batch_size, 3);
  EXPECT_NE(error_of({"training.recompute=moe"}).find("'training.recompute' is 'moe', not one of: none, experts, attention, full"),
            std::string::npos);
  EXPECT_NE(error_of({"training.micro_batch_size=most"}).find("'training.micro_batch_size' must be an integer"),
            std::string::npos) << error_of({"training.micro_batch_size=most"});
}

TEST(RecipeTrainingKeys, LmHeadChunkRows) {
  EXPECT_EQ(parse_recipe("", "recipe.yaml").training.lm_head_chunk_rows, 0);  // auto: ops/lm_head_chunk.h
  EXPECT_EQ(parse_recipe("", "r", {"training.lm_head_chunk_rows=2048"}).training.lm_head_chunk_rows, 2048);
  EXPECT_NE(error_of({"training.lm_head_chunk_rows=-1"}).find("'training.lm_head_chunk_rows' must not be negative"),
            std::string::npos);
}

TEST_F(TrainerTest, RecomputeAndAutoMicroBatchNeedTheGpuEngine) {
  const auto error = [](const auto& attempt) -> std::string {
    try {
      attempt();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error([&] { make_engine(recipe("r", {"training.recompute=full"})); }).find("runs on the GPU engine"),
            std::string::npos);
  EXPECT_NE(error([&] { Trainer(recipe("a", {"training.micro_batch_size=auto"}), {}, false); })
                .find("training.micro_batch_size auto sizes the micro-batch to the GPU's memory"),
            std::string::npos);
}

TEST(RecipeTrainingKeys, FileErrorsNameTheLine) {
  const auto error_in = [](const std::string& yaml) {
    try {
      parse_recipe(yaml, "recipe.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_in("data:\n  max_length: 64\ntraining:\n  freez: [router]\n").find("recipe.yaml:4: unknown key 'training.freez'"),
            std::string::npos);
  EXPECT_NE(error_in("training:\n\n  micro_batch_size: two\n").find("recipe.yaml:3: 'training.micro_batch_size' must be an integer"),
            std::string::npos);
}

TEST_F(TrainerTest, AuxLossCoefReplacesTheConfigs) {
  EXPECT_DOUBLE_EQ(make_cpu_engine(recipe("a", {"training.aux_loss_coef=0.25"}))->spec().aux_loss_coef, 0.25);
  EXPECT_NE(make_cpu_engine(recipe("b"))->spec().aux_loss_coef, 0.25);  // config.json's
  // The gradient moves with the coefficient (the logged losses are the LM loss and the aux loss themselves).
  Trainer(recipe("small", {"training.aux_loss=on", "training.aux_loss_coef=0", "training.max_steps=1"}), {}, false).run();
  Trainer(recipe("large", {"training.aux_loss=on", "training.aux_loss_coef=10", "training.max_steps=1"}), {}, false).run();
  EXPECT_DOUBLE_EQ(metrics("small")[0]["aux_loss"], metrics("large")[0]["aux_loss"]);
  EXPECT_DOUBLE_EQ(metrics("small")[0]["loss"], metrics("large")[0]["loss"]);
  EXPECT_NE(metrics("small")[0]["grad_norm"], metrics("large")[0]["grad_norm"]);
}

TEST_F(TrainerTest, FreezeKeepsTheNamedParametersOutOfTheOptimizer) {
  const auto engine = make_cpu_engine(recipe("frozen", {"training.freeze=['layers.*.moe.router']"}));
  size_t moments = 0, frozen = 0;
  for (const auto& [name, tensor] : engine->training_state()) {
    if (name.rfind("adam_m.", 0) == 0) ++moments;
    if (name.rfind("adam_m.", 0) == 0 && name.find("moe.router") != std::string::npos) ++frozen;
  }
  EXPECT_GT(moments, 0u);
  EXPECT_EQ(frozen, 0u);
  Trainer(recipe("frozen_run", {"training.freeze=['layers.*.moe.router']", "training.max_steps=2"}), {}, false).run();
  try {
    make_cpu_engine(recipe("bad", {"training.freeze=['no.such.*']"}));
    ADD_FAILURE() << "a pattern that matches nothing must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.freeze: no parameter matches the pattern 'no.such.*'"), std::string::npos) << e.what();
  }
}

TEST(LineMapping, OtherSpellingsReadAsTheKnownShapes) {
  const data::LineMapping mapping(json{{"messages", "chat"}, {"role", "speaker"}, {"content", "text"}, {"prompt", "question"}},
                                  json{{"human", "user"}, {"bot", "assistant"}});
  const data::Json line = data::Json::parse(R"({"chat": [{"speaker": "human", "text": "hi"}, {"speaker": "bot", "text": "yo"}], "id": 7})");
  EXPECT_EQ(mapping.apply(line).dump(),
            R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"id":7})");
  // "text" is a message field here, so a top-level "text" key stays as it is.
  EXPECT_EQ(mapping.apply(data::Json::parse(R"({"text": "plain"})")).dump(), R"({"text":"plain"})");
  EXPECT_EQ(mapping.apply(data::Json::parse(R"({"question": "q?", "completion": "a"})")).dump(), R"({"prompt":"q?","completion":"a"})");
  EXPECT_THROW(mapping.apply(data::Json::parse(R"({"question": "q?", "prompt": "p"})")), Error);
  EXPECT_THROW(data::LineMapping(json{{"prompt", "q"}, {"completion", "q"}}, json::object()), Error);
}

std::vector<data::LineRef> lines_of(const std::vector<int>& per_file) {
  std::vector<data::LineRef> lines;
  for (size_t f = 0; f < per_file.size(); ++f)
    for (int i = 0; i < per_file[f]; ++i) lines.push_back({uint32_t(f), uint64_t(i), i + 1});
  return lines;
}

TEST(Mixing, SharesFollowTheWeightsAndEachEpochIsItsOwn) {
  // Three files of two entries: entry 0 holds files 0 and 1 (10 + 10 lines), entry 1 file 2 (5 lines).
  const std::vector<data::LineRef> lines = lines_of({10, 10, 5});
  const data::Mixing mixing = data::mixing_from_recipe({"a/", "b.jsonl"}, json{{"a/", 1}, {"b.jsonl", 4}}, {0, 0, 1});
  const auto order = data::mixed_order(lines, mixing, 7, 0, true);
  ASSERT_EQ(order.size(), lines.size());
  const auto from_b = std::count_if(order.begin(), order.end(), [&](size_t i) { return lines[i].file == 2; });
  EXPECT_EQ(from_b, 20);  // 4/5 of 25 lines from 5: each of b's lines four times
  EXPECT_EQ(data::mixed_order(lines, mixing, 7, 0, true), order);  // a function of (seed, epoch): exact resume
  EXPECT_NE(data::mixed_order(lines, mixing, 7, 1, true), order);
  // Downsampled entry a (5 of its 20 lines an epoch): four epochs visit each of its lines once.
  std::vector<int> seen(20, 0);
  for (int epoch = 0; epoch < 4; ++epoch)
    for (size_t i : data::mixed_order(lines, mixing, 7, epoch, true))
      if (lines[i].file != 2) ++seen[i];
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST_F(TrainerTest, MixedSourcesResumeExactly) {
  const std::string all = testing::read_file(dir_ / "train.jsonl");
  const size_t half = all.find('\n', all.size() / 2) + 1;
  testing::write_file(dir_ / "a.jsonl", all.substr(0, half));
  testing::write_file(dir_ / "b.jsonl", all.substr(half));
  const std::vector<std::string> mixed = {"data.train=[" + (dir_ / "a.jsonl").string() + ", " + (dir_ / "b.jsonl").string() + "]",
                                          "data.train_weights={" + (dir_ / "a.jsonl").string() + ": 3, " +
                                              (dir_ / "b.jsonl").string() + ": 1}"};
  Trainer(recipe("whole", mixed), {}, false).run();
  {
    Trainer first_half(recipe("split", mixed), {}, false);
    first_half.stop_after(3);
    EXPECT_TRUE(first_half.run().interrupted);
  }
  Trainer(recipe("split", mixed), {}, /*resume=*/true).run();
  Trainer(recipe("unmixed"), {}, false).run();
  std::vector<double> whole, split, unmixed;
  for (const json& r : metrics("whole")) if (r.contains("grad_norm")) whole.push_back(r["loss"]);
  for (const json& r : metrics("split")) if (r.contains("grad_norm")) split.push_back(r["loss"]);
  for (const json& r : metrics("unmixed")) if (r.contains("grad_norm")) unmixed.push_back(r["loss"]);
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(split, whole);
  EXPECT_NE(unmixed, whole);
}

}  // namespace
}  // namespace moetune::train
