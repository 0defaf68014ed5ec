// The fine-tuning loop end to end on the CPU: logs, checkpoints, an exact resume, clean interruption.
#include <gtest/gtest.h>

#include <csignal>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>
#include <zlib.h>

#include "moetune/train/trainer.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune::train {
namespace {

using nlohmann::json;
using testing::TrainerTest;

// The names of the regular files directly in `folder`.
std::set<std::string> file_names(const std::filesystem::path& folder) {
  std::set<std::string> names;
  for (const auto& item : std::filesystem::directory_iterator(folder))
    if (item.is_regular_file()) names.insert(item.path().filename().string());
  return names;
}

TEST_F(TrainerTest, LogsAndCheckpointsAnHfFolder) {
  Trainer trainer(recipe("run", {"output.save_every=2", "output.keep_last=2"}), {}, false);
  TrainResult result = trainer.run();
  EXPECT_EQ(result.steps, 6);
  EXPECT_FALSE(std::isnan(result.validation_loss));
  const auto records = metrics("run");
  ASSERT_GE(records.size(), 6u);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_second", "model_tflops_per_second", "aux_loss", "moe"})
    EXPECT_TRUE(records[0].contains(key)) << key;
  // 6 x the active matmul parameters + the attention scores of rows of data.max_length, times tokens per second.
  EXPECT_GT(records[0]["model_tflops_per_second"].get<double>(), 0.0);
  EXPECT_EQ(records[0]["moe"].size(), 2u);  // two MoE layers, each with its load spread and router entropy
  EXPECT_EQ(records[0]["moe"][0]["dropped"], 0);
  // Checkpoints at steps 4 and 6 kept (keep_last 2), step 2 removed; each a loadable HF folder.
  auto checkpoints = list_checkpoints(dir_ / "run");
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_EQ(checkpoints.back().filename(), "checkpoint-000006");
  EXPECT_NO_THROW(model::CausalLM::from_pretrained(checkpoints.back()));
  // The final model is the last checkpoint's HF folder without the training state (3x the model), so that
  // uploading it uploads the model only.
  // Each checkpoint is a clean HF folder too: its training state sits in a subfolder.
  EXPECT_EQ(result.final_model, dir_ / "run" / "final-model");
  const std::set<std::string> model_files = {"config.json", "generation_config.json", "model.safetensors"};
  EXPECT_EQ(file_names(result.final_model), model_files);
  EXPECT_EQ(file_names(checkpoints.back()), model_files);
  EXPECT_EQ(file_names(checkpoints.back() / "training_state"),
            (std::set<std::string>{"trainer_state.json", "training_state.safetensors"}));
  EXPECT_NO_THROW(model::CausalLM::from_pretrained(result.final_model));
  // TensorBoard gets the per-layer MoE statistics too (the event files hold the tags as plain text).
  std::string events;
  for (const auto& item : std::filesystem::directory_iterator(dir_ / "run" / "tensorboard"))
    events += testing::read_file(item.path());
  for (const char* tag : {"train/loss", "train/model_tflops_per_second", "train/moe/layer00/load_max_over_mean",
                          "train/moe/layer02/load_min_over_mean", "validation/loss"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
  // Nothing half-written is left behind.
  for (const auto& item : std::filesystem::directory_iterator(dir_ / "run"))
    EXPECT_FALSE(item.path().filename().string().ends_with(".tmp")) << item.path();
}

// The fine-tuning job on the families added with the model description (Mixtral; Qwen2-MoE with its shared
// expert; DeepSeek-V3 with its frozen correction-bias buffer; Nemotron-H with Mamba2 and latent MoE layers): it trains, the loss falls, and the final folder loads again.
TEST_F(TrainerTest, FinetunesTheNewFamilies) {
  for (const auto& [family, architecture] : {std::pair{"mixtral_tiny", "MixtralForCausalLM"},
                                            std::pair{"qwen2_moe_tiny", "Qwen2MoeForCausalLM"},
                                            std::pair{"deepseek_v3_tiny", "DeepseekV3ForCausalLM"},
                                            std::pair{"nemotron_h_tiny", "NemotronHForCausalLM"}}) {
    SCOPED_TRACE(family);
    Trainer trainer(recipe(family, {"model=" + testing::fixture(family).string()}), {}, false);
    TrainResult result = trainer.run();
    EXPECT_EQ(result.steps, 6);
    const auto records = metrics(family);
    ASSERT_GE(records.size(), 6u);
    EXPECT_LT(records.back()["loss"].get<double>(), records.front()["loss"].get<double>());
    EXPECT_NO_THROW(model::CausalLM::from_pretrained(result.final_model));
    EXPECT_NE(testing::read_file(result.final_model / "config.json").find(architecture), std::string::npos);
  }
}

// DeepSeek-V3's correction biases stay as loaded unless training.router_bias_update_rate asks for the
// aux-loss-free balancing; then 6 steps move each by a multiple of the rate. Models without them refuse the key.
TEST_F(TrainerTest, RouterBiasBalancingIsOffByDefaultAndMovesTheBiasesWhenAsked) {
  const std::string deepseek = "model=" + testing::fixture("deepseek_v3_tiny").string();
  const std::string name = "layers.1.moe.router_correction_bias";
  const Tensor original = model::load_checkpoint(testing::fixture("deepseek_v3_tiny")).parameter(name).clone();
  const TrainResult off = Trainer(recipe("off", {deepseek}), {}, false).run();
  EXPECT_TRUE(model::load_checkpoint(off.final_model).parameter(name).same_bytes(original));
  const TrainResult on = Trainer(recipe("on", {deepseek, "training.router_bias_update_rate=0.125"}), {}, false).run();
  const Tensor moved = model::load_checkpoint(on.final_model).parameter(name);
  testing::expect_balanced_by_whole_steps(original, moved, 0.125, 6);
  try {
    Trainer(recipe("qwen", {"training.router_bias_update_rate=0.125"}), {}, false).run();
    FAIL() << "a model without correction biases took training.router_bias_update_rate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no correction bias"), std::string::npos) << e.what();
  }
}

// data.train naming a folder that holds the data gzip-compressed trains on the same lines as the plain file.
TEST_F(TrainerTest, AFolderOfGzipDataTrainsAsThePlainFile) {
  std::filesystem::create_directories(dir_ / "folder");
  const std::string text = testing::read_file(dir_ / "train.jsonl");
  gzFile out = gzopen((dir_ / "folder" / "train.jsonl.gz").c_str(), "wb");
  ASSERT_EQ(gzwrite(out, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(out);
  Trainer(recipe("plain"), {}, false).run();
  Trainer(recipe("gz", {"data.train=" + (dir_ / "folder").string()}), {}, false).run();
  std::vector<double> plain, gz;
  for (const json& r : metrics("plain")) plain.push_back(r["loss"]);
  for (const json& r : metrics("gz")) gz.push_back(r["loss"]);
  EXPECT_EQ(gz, plain);
  EXPECT_EQ(plain.size(), 7u);  // 6 steps and the validation loss
}

// training.aux_loss overrides config.json's output_router_logits (the fixture's is true) without editing it.
TEST_F(TrainerTest, AuxLossSettingOverridesTheConfig) {
  Trainer(recipe("off", {"training.aux_loss=off", "training.max_steps=1"}), {}, false).run();
  Trainer(recipe("on", {"training.aux_loss=on", "training.max_steps=1"}), {}, false).run();
  EXPECT_FALSE(metrics("off")[0].contains("aux_loss"));
  EXPECT_TRUE(metrics("on")[0].contains("aux_loss"));
}

// A checkpoint written before the training_state/ subfolder (its state files beside the model) resumes too, for
// one release; the checkpoints written after it have the subfolder.
// data.chat_template replaces the model's template for training, so it is the template the saved model carries.
TEST_F(TrainerTest, TheTemplateTrainedWithIsSavedWithTheModel) {
  const std::string chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}";
  testing::write_file(dir_ / "template.jinja", chat_template);
  Trainer trainer(recipe("templated", {"data.chat_template=" + (dir_ / "template.jinja").string(), "training.max_steps=2"}),
                  {}, false);
  const TrainResult result = trainer.run();
  EXPECT_EQ(testing::read_file(list_checkpoints(dir_ / "templated").back() / "chat_template.jinja"), chat_template);
  EXPECT_EQ(testing::read_file(result.final_model / "chat_template.jinja"), chat_template);
}

TEST_F(TrainerTest, ResumedRunMatchesAnUninterruptedOne) {
  Trainer whole(recipe("whole"), {}, false);
  whole.run();
  for (const bool old_layout : {false, true}) {
    SCOPED_TRACE(old_layout ? "state beside the model" : "state in training_state/");
    const std::string output = old_layout ? "split_old" : "split";
    {
      Trainer first_half(recipe(output), {}, false);
      first_half.stop_after(3);
      EXPECT_TRUE(first_half.run().interrupted);
    }
    const std::filesystem::path checkpoint = dir_ / output / "checkpoint-000003";
    if (old_layout) {
      for (const char* name : {"trainer_state.json", "training_state.safetensors"})
        std::filesystem::rename(checkpoint / "training_state" / name, checkpoint / name);
      std::filesystem::remove(checkpoint / "training_state");
    }
    Trainer second_half(recipe(output), {}, /*resume=*/true);
    EXPECT_EQ(second_half.run().steps, 6);
    auto expected = metrics("whole"), actual = metrics(output);
    std::vector<double> expected_losses, actual_losses;
    for (const json& r : expected)
      if (r.contains("grad_norm")) expected_losses.push_back(r["loss"]);
    for (const json& r : actual)
      if (r.contains("grad_norm")) actual_losses.push_back(r["loss"]);
    EXPECT_EQ(actual_losses, expected_losses);
    ASSERT_EQ(actual_losses.size(), 6u);
    EXPECT_TRUE(std::filesystem::exists(dir_ / output / "checkpoint-000006" / "training_state" / "trainer_state.json"));
  }
}

TEST_F(TrainerTest, RefusesToOverwriteARunWithoutResume) {
  Trainer(recipe("run"), {}, false).run();
  EXPECT_THROW(Trainer(recipe("run"), {}, false), Error);
  EXPECT_THROW(Trainer(recipe("empty"), {}, true), Error);  // nothing to resume
}

TEST_F(TrainerTest, SigintFinishesTheStepAndCheckpoints) {
  testing::StopHandlers handlers;
  Trainer trainer(recipe("interrupted", {"training.max_steps=100000"}), {}, false);
  std::thread interrupter(testing::interrupt_after_first_step, dir_ / "interrupted" / "metrics.jsonl");
  TrainResult result = trainer.run();
  interrupter.join();
  EXPECT_TRUE(result.interrupted);
  EXPECT_GE(result.steps, 1);
  ASSERT_EQ(list_checkpoints(dir_ / "interrupted").size(), 1u);
  EXPECT_EQ(list_checkpoints(dir_ / "interrupted")[0].filename(), fmt::format("checkpoint-{:06d}", result.steps));
}

// Item 11 of issue 16: a signal before the first step stops at once, without a checkpoint.
TEST_F(TrainerTest, SigintBeforeTheFirstStepStopsWithoutWriting) {
  testing::StopHandlers handlers;
  Trainer trainer(recipe("early"), {}, false);
  std::raise(SIGINT);
  TrainResult result = trainer.run();
  EXPECT_TRUE(result.interrupted);
  EXPECT_EQ(result.steps, 0);
  EXPECT_TRUE(list_checkpoints(dir_ / "early").empty());
  EXPECT_THROW(Trainer(recipe("early2"), {}, false), StartupInterrupted);  // during start-up: before anything is written
  EXPECT_FALSE(std::filesystem::exists(dir_ / "early2" / "metrics.jsonl"));
}

}  // namespace
}  // namespace moetune::train
