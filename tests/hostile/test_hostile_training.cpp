// Issue 16, items 5, 6, 8, 10–12 and 14–19 on the trainer: folders that look like checkpoints, two runs on one
// output folder, NaN models, data that cannot train, damaged resume state, links planted in the output folder.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "moetune/io/safetensors.h"
#include "moetune/model/causal_lm.h"
#include "moetune/train/trainer.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HostileTraining : public testing::TrainerTest {
 protected:
  // The Error message of `body`, or "" when it throws none.
  template <typename Body>
  static std::string error_of(Body&& body) {
    try {
      body();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // The tiny MoE with every q_proj weight NaN, saved under the scratch folder.
  fs::path nan_model() {
    model::CausalLM model = model::CausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
    const auto& specs = model.weights().layout.parameters;
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name.find("qkv") != std::string::npos) {
        Tensor& qkv = model.parameters().values()[i];
        for (int64_t j = 0; j < qkv.numel() / 2; ++j) qkv.data<float>()[j] = NAN;  // the q rows come first
      }
    model.save_pretrained(dir_ / "nan_model");
    return dir_ / "nan_model";
  }
  static fs::path state_file(const fs::path& checkpoint) { return checkpoint / "training_state" / "trainer_state.json"; }
  json trainer_state(const fs::path& checkpoint) { return json::parse(testing::read_file(state_file(checkpoint))); }
  void edit_trainer_state(const fs::path& checkpoint, const std::string& key, const json& value) {
    json state = trainer_state(checkpoint);
    state[key] = value;
    testing::write_file(state_file(checkpoint), state.dump());
  }
};

TEST_F(HostileTraining, CheckpointsAreCheckpointDigitsWithAStateSortedByNumber) {
  for (const char* name : {"checkpoint-999999", "checkpoint-1000000", "checkpoint-best", "checkpoint-12x"}) {
    fs::create_directories(dir_ / "out" / name / "training_state");
    testing::write_file(state_file(dir_ / "out" / name), "{}");
  }
  // A checkpoint written before the training_state/ subfolder keeps its state beside the model.
  fs::create_directories(dir_ / "out" / "checkpoint-000007");
  testing::write_file(dir_ / "out" / "checkpoint-000007" / "trainer_state.json", "{}");
  fs::create_directories(dir_ / "out" / "checkpoint-000005" / "training_state");  // no state: not a checkpoint
  const auto checkpoints = list_checkpoints(dir_ / "out");
  ASSERT_EQ(checkpoints.size(), 3u);
  EXPECT_EQ(checkpoints[0].filename(), "checkpoint-000007");
  EXPECT_EQ(checkpoints[1].filename(), "checkpoint-999999");
  EXPECT_EQ(checkpoints[2].filename(), "checkpoint-1000000");
}

TEST_F(HostileTraining, UsersCheckpointFoldersSurviveRotationAndResume) {
  fs::create_directories(dir_ / "run" / "checkpoint-best");
  testing::write_file(dir_ / "run" / "checkpoint-best" / "trainer_state.json", "{\"step\": 99}");
  {
    Trainer first(recipe("run", {"output.save_every=1", "output.keep_last=1"}), {}, false);
    first.stop_after(2);
    first.run();
  }
  Trainer second(recipe("run", {"output.save_every=1", "output.keep_last=1"}), {}, true);
  EXPECT_EQ(second.run().steps, 6);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoint-best" / "trainer_state.json"));
  EXPECT_EQ(list_checkpoints(dir_ / "run").back().filename(), "checkpoint-000006");
}

TEST_F(HostileTraining, ASecondRunOnTheSameOutputIsRefusedNamingTheHolder) {
  Trainer first(recipe("shared"), {}, false);
  const std::string message = error_of([&] { Trainer second(recipe("shared"), {}, false); });
  EXPECT_NE(message.find("another moetune run is using this output.dir (pid " + std::to_string(::getpid())), std::string::npos)
      << message;
  EXPECT_EQ(first.run().steps, 6);
}

TEST_F(HostileTraining, NanModelGivesANanLossAndStopsWithoutACheckpoint) {
  const fs::path model = nan_model();
  {  // CPU attention no longer hides a NaN score row as "no visible key"
    model::CausalLM loaded = model::CausalLM::from_pretrained(model);
    Tensor ids = Tensor::zeros({1, 4}, DType::I64);
    for (int64_t t = 0; t < 4; ++t) ids.data<int64_t>()[t] = t + 3;
    EXPECT_TRUE(std::isnan(loaded.forward({.input_ids = ids, .labels = ids}).lm_loss));
  }
  const std::string message = error_of([&] { Trainer(recipe("nan", {"model=" + model.string()}), {}, false).run(); });
  EXPECT_NE(message.find("step 1: the loss is nan"), std::string::npos) << message;
  EXPECT_NE(message.find("training.max_nonfinite_steps is 0"), std::string::npos) << message;
  EXPECT_TRUE(list_checkpoints(dir_ / "nan").empty());
  const auto records = metrics("nan");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["loss"], "NaN");  // not null
}

TEST_F(HostileTraining, NonFiniteStepsCanBeSkippedUpToALimit) {
  const std::string message = error_of([&] {
    Trainer(recipe("skip", {"model=" + nan_model().string(), "training.max_nonfinite_steps=2"}), {}, false).run();
  });
  EXPECT_NE(message.find("step 3: the loss is nan"), std::string::npos) << message;
  EXPECT_EQ(metrics("skip").size(), 3u);
}

TEST_F(HostileTraining, DataWithoutAScoredTokenIsAnError) {
  testing::write_file(dir_ / "prompts.jsonl", "{\"prompt\": \"abc\", \"completion\": \"\"}\n{\"prompt\": \"de\", \"completion\": \"\"}\n");
  data::TextCodec codec;  // one token per byte, inside the fixture's vocabulary of 96
  codec.encode = [](std::string_view text) {
    std::vector<int64_t> ids;
    for (char c : text) ids.push_back(c % 90 + 2);
    return ids;
  };
  const std::string message = error_of([&] {
    Trainer(recipe("masked", {"data.train=" + (dir_ / "prompts.jsonl").string(), "data.validation_fraction=0"}), codec, false);
  });
  EXPECT_NE(message.find("prompts.jsonl: no token of the data is scored"), std::string::npos) << message;
}

TEST_F(HostileTraining, AStepWithoutAScoredTokenAndAnOverlongMaxLengthAreWarnedAbout) {
  testing::write_file(dir_ / "mixed.jsonl", "{\"prompt\": \"abc\", \"completion\": \"\"}\n{\"prompt\": \"de\", \"completion\": \"fg\"}\n");
  data::TextCodec codec;
  codec.encode = [](std::string_view text) {
    std::vector<int64_t> ids;
    for (char c : text) ids.push_back(c % 90 + 2);
    return ids;
  };
  ::testing::internal::CaptureStderr();
  Trainer(recipe("mixed", {"data.train=" + (dir_ / "mixed.jsonl").string(), "data.validation_fraction=0",
                           "data.shuffle=false", "data.packing=false", "data.max_length=100000",
                           "training.micro_batch_size=1", "training.gradient_accumulation_steps=1", "training.max_steps=2"}),
          codec, false)
      .run();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("warning: data.max_length 100000 is above the model's max_position_embeddings"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("warning: step 1 has no token the loss scores"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("warning: step 2"), std::string::npos) << warnings;
}

TEST_F(HostileTraining, ABadLastLineStopsTheRunBeforeTheFirstStep) {
  std::ofstream(dir_ / "train.jsonl", std::ios::app) << "{\"input_ids\": [1, \"two\"]}\n";
  const std::string message = error_of([&] { Trainer(recipe("bad_last"), {}, false); });
  EXPECT_NE(message.find("train.jsonl: line 41"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "bad_last" / "metrics.jsonl"));
}

TEST_F(HostileTraining, MicroBatchesLargerThanTheDataAreAnErrorNotAHang) {
  for (const char* setting : {"training.micro_batch_size=1000000000", "data.max_length=1000000000"}) {
    const std::string message = error_of([&] { Trainer(recipe("huge", {setting}), {}, false).run(); });
    EXPECT_NE(message.find("train.jsonl: one micro-batch of"), std::string::npos) << setting << ": " << message;
    fs::remove_all(dir_ / "huge");
  }
}

TEST_F(HostileTraining, DamagedNewestCheckpointFallsBackToThePreviousOne) {
  {
    Trainer first(recipe("resume", {"output.save_every=1", "output.keep_last=3"}), {}, false);
    first.stop_after(3);
    first.run();
  }
  edit_trainer_state(dir_ / "resume" / "checkpoint-000003", "step", -5);
  Trainer second(recipe("resume", {"output.save_every=1", "output.keep_last=3"}), {}, true);
  EXPECT_EQ(second.run().steps, 6);
  // The records of step 3 that the fallback rolled back are gone: each step is logged once.
  std::vector<int64_t> steps;
  for (const json& record : metrics("resume"))
    if (record.contains("grad_norm")) steps.push_back(record["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(HostileTraining, ResumeStateIsCheckedAndRestored) {
  {
    Trainer first(recipe("state"), {}, false);
    first.stop_after(2);
    first.run();
  }
  const fs::path checkpoint = dir_ / "state" / "checkpoint-000002";
  const json good = trainer_state(checkpoint);
  const std::pair<const char*, json> bad_fields[] = {{"step", -1}, {"data_cursor", 1000000}, {"optimizer_steps", "2"},
                                                     {"skipped_lines", -3}};
  for (const auto& [key, value] : bad_fields) {
    edit_trainer_state(checkpoint, key, value);
    const std::string message = error_of([&] { Trainer(recipe("state"), {}, true); });
    EXPECT_NE(message.find("checkpoint-000002/training_state/trainer_state.json: \"" + std::string(key) + "\""),
              std::string::npos)
        << message;
    testing::write_file(state_file(checkpoint), good.dump());
  }
  fs::remove(state_file(checkpoint));  // no state left: not a checkpoint at all
  EXPECT_NE(error_of([&] { Trainer(recipe("state"), {}, true); }).find("no checkpoint-* folder"), std::string::npos);
  testing::write_file(state_file(checkpoint), good.dump());

  edit_trainer_state(checkpoint, "skipped_lines", 7);
  Trainer resumed(recipe("state"), {}, true);
  resumed.run();
  EXPECT_EQ(trainer_state(dir_ / "state" / "checkpoint-000006")["skipped_lines"], 7);
}

TEST_F(HostileTraining, AStateTensorOfTheWrongShapeIsNamed) {
  {
    Trainer first(recipe("shape"), {}, false);
    first.stop_after(1);
    first.run();
  }
  const fs::path path = dir_ / "shape" / "checkpoint-000001" / "training_state" / "training_state.safetensors";
  io::NamedTensors tensors;
  std::string changed;
  {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    for (const auto& entry : file.entries()) {
      Tensor tensor = file.tensor(entry.name).clone();
      if (changed.empty() && entry.shape.size() == 2) {  // same elements, another shape
        tensor = tensor.view({-1});
        changed = entry.name;
      }
      tensors.emplace_back(entry.name, tensor);
    }
  }
  io::save_safetensors(path, tensors);
  const std::string message = error_of([&] { Trainer(recipe("shape"), {}, true); });
  EXPECT_NE(message.find("'" + changed + "' is F32 ["), std::string::npos) << message;
  EXPECT_NE(message.find("training_state.safetensors"), std::string::npos) << message;
}

TEST_F(HostileTraining, SigintCutsValidationShort) {
  std::string lines;  // a validation pass long enough for the signal to land in it
  for (int i = 0; i < 3000; ++i) lines += "{\"input_ids\": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}\n";
  testing::write_file(dir_ / "validation.jsonl", lines);
  testing::StopHandlers handlers;
  Trainer trainer(recipe("validating", {"training.max_steps=100000", "logging.validation_every=1",
                                        "data.validation=" + (dir_ / "validation.jsonl").string()}),
                  {}, false);
  std::thread interrupter(testing::interrupt_after_first_step, dir_ / "validating" / "metrics.jsonl");
  const TrainResult result = trainer.run();
  interrupter.join();
  EXPECT_TRUE(result.interrupted);
  EXPECT_EQ(result.steps, 1);  // stopped in the validation after step 1, which wrote no loss
  for (const json& record : metrics("validating")) EXPECT_TRUE(record.contains("grad_norm")) << record.dump();
  EXPECT_EQ(list_checkpoints(dir_ / "validating").size(), 1u);
}

TEST_F(HostileTraining, OutputFolderThatIsAFileOrALinkedMetricsLogIsRefused) {
  testing::write_file(dir_ / "a_file", "x");
  EXPECT_NE(error_of([&] { Trainer(recipe("a_file"), {}, false); }).find("a_file: output.dir cannot be used"), std::string::npos);
  fs::create_directories(dir_ / "linked");
  testing::write_file(dir_ / "elsewhere.jsonl", "");
  fs::create_symlink(dir_ / "elsewhere.jsonl", dir_ / "linked" / "metrics.jsonl");
  EXPECT_NE(error_of([&] { Trainer(recipe("linked"), {}, false); }).find("metrics.jsonl"), std::string::npos);
  EXPECT_EQ(testing::read_file(dir_ / "elsewhere.jsonl"), "");
}

}  // namespace
}  // namespace moetune::train
