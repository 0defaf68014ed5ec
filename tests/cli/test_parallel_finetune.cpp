// `moetune finetune --nproc-per-node 2` end to end on the CPU engine: two ranks with expert parallelism 2
// train what one rank trains with accumulation 2 (losses and gradient norms of every step), write one HF
// folder that loads whole, resume exactly, and refuse to resume under another layout.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moetune/core/device.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/checkpoint.h"
#include "moetune/parallel/world.h"
#include "json_lines.h"
#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> metrics(const fs::path& run) { return testing::read_json_lines(run / "metrics.jsonl"); }

double max_difference(const fs::path& a, const fs::path& b) {
  const model::ModelWeights x = model::load_checkpoint(a), y = model::load_checkpoint(b, {DType::F32});
  double worst = 0;
  for (size_t i = 0; i < x.parameters.size(); ++i)
    for (int64_t j = 0; j < x.parameters[i].numel(); ++j)
      worst = std::max(worst, double(std::abs(x.parameters[i].data<float>()[j] - y.parameters[i].data<float>()[j])));
  return worst;
}

class ParallelFinetune : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!parallel::mpi_available()) GTEST_SKIP() << "built without MPI";
    std::string lines;
    for (int i = 0; i < 16; ++i) {
      lines += "{\"input_ids\": [";
      for (int t = 0; t < 6 + i % 5; ++t) lines += (t ? ", " : "") + std::to_string((i * 7 + t * 13) % 96);
      lines += "]}\n";
    }
    testing::write_file(dir_ / "data.jsonl", lines);
    // Open MPI leaks by design; the ranks are separate processes with their own sanitizer settings.
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
  }
  std::string job(const std::string& output, const std::string& more) const {
    return "finetune --set model=" + testing::fixture("qwen3_moe_tiny").string() + " --set data.train=" +
           (dir_ / "data.jsonl").string() + " --set training.device=cpu --set training.micro_batch_size=1" +
           " --set data.max_length=16 --set data.packing=false --set training.max_steps=4 --set optimizer.lr=1e-3" +
           " --set training.aux_loss=on --set logging.tensorboard=false --set output.dir=" + (dir_ / output).string() + " " + more;
  }
  testing::ScratchDir dir_;
};

TEST_F(ParallelFinetune, TwoRanksMatchOneRankWithAccumulationAndResumeExactly) {
  const testing::RunResult one = testing::run_moetune(job("one", "--set training.gradient_accumulation_steps=2"));
  ASSERT_EQ(one.status, 0) << one.output;
  const testing::RunResult two = testing::run_moetune(job("two", "--nproc-per-node 2 --set parallel.expert=2 --set output.save_every=2"));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("on 2 ranks, expert parallel 2"), std::string::npos) << two.output;
  const auto a = metrics(dir_ / "one"), b = metrics(dir_ / "two");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u) << two.output;
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "aux_loss"}) {
      const double x = a[i][key], y = b[i][key];
      EXPECT_LT(std::abs(x - y), 1e-6 * std::abs(x)) << "step " << i + 1 << " " << key << ": " << x << " vs " << y;
    }
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]);
  }
  // Data parallel alone (every rank the whole model): the same steps, rank 0 writes the folder.
  const testing::RunResult dp = testing::run_moetune(job("dp", "--nproc-per-node 2"));
  ASSERT_EQ(dp.status, 0) << dp.output;
  const auto c = metrics(dir_ / "dp");
  ASSERT_EQ(c.size(), 4u) << dp.output;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["loss"], y = c[i]["loss"];
    EXPECT_LT(std::abs(x - y), 1e-6 * std::abs(x)) << "step " << i + 1 << ": " << x << " vs " << y;
  }
  EXPECT_LT(max_difference(dir_ / "dp" / "final-model", dir_ / "one" / "final-model"), 1e-5);

  // One HF folder from both ranks: an index and a shard per rank, loaded whole.
  EXPECT_TRUE(fs::exists(dir_ / "two" / "final-model" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ / "two" / "final-model" / "model-00002-of-00002.safetensors"));
  EXPECT_LT(max_difference(dir_ / "two" / "final-model", dir_ / "one" / "final-model"), 1e-5);

  // Resume from step 2 on two ranks: the same final weights, bit for bit.
  testing::copy_folder(dir_ / "two", dir_ / "resumed");
  fs::remove_all(dir_ / "resumed" / "checkpoint-000004");
  fs::remove_all(dir_ / "resumed" / "final-model");
  fs::remove(dir_ / "resumed" / ".moetune.lock");
  const testing::RunResult resumed =
      testing::run_moetune(job("resumed", "--nproc-per-node 2 --set parallel.expert=2 --set output.save_every=2 --resume"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_difference(dir_ / "resumed" / "final-model", dir_ / "two" / "final-model"), 0.0);

  // Another layout is refused, naming both.
  const testing::RunResult other = testing::run_moetune(job("two", "--set training.max_steps=6 --resume"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("written by a run of 2 rank(s) with parallel.expert 2, but this run has 1 rank(s)"),
            std::string::npos) << other.output;
}

// 8-bit AdamW state under ZeRO: each rank keeps its shard's moments in 8 bits (blocks counted from the shard's
// start, so not the one-rank run's blocks: close to its losses, not equal), saves them as
// zero.<run>.adam_m/_absmax, and resumes exactly.
TEST_F(ParallelFinetune, Int8StateShardsAndResumesExactly) {
  const std::string two_ranks = "--nproc-per-node 2 --set parallel.expert=2 --set optimizer.state=int8 --set output.save_every=2";
  const testing::RunResult one = testing::run_moetune(job("one", "--set training.gradient_accumulation_steps=2"));
  ASSERT_EQ(one.status, 0) << one.output;
  const testing::RunResult two = testing::run_moetune(job("two", two_ranks));
  ASSERT_EQ(two.status, 0) << two.output;
  const auto a = metrics(dir_ / "one"), b = metrics(dir_ / "two");
  ASSERT_EQ(b.size(), 4u) << two.output;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["loss"], y = b[i]["loss"];
    EXPECT_LT(std::abs(x - y), 0.02 * std::abs(x)) << "step " << i + 1 << ": " << x << " vs " << y;
  }
  const io::SafetensorsFile state =
      io::SafetensorsFile::open(dir_ / "two" / "checkpoint-000002" / "training_state" / "training_state-rank00000-of-00002.safetensors");
  EXPECT_EQ(state.tensor("zero.replicated.adam_m").dtype(), DType::U8);
  EXPECT_TRUE(state.contains("zero.experts.adam_v_absmax"));

  testing::copy_folder(dir_ / "two", dir_ / "resumed");
  fs::remove_all(dir_ / "resumed" / "checkpoint-000004");
  fs::remove_all(dir_ / "resumed" / "final-model");
  fs::remove(dir_ / "resumed" / ".moetune.lock");
  const testing::RunResult resumed = testing::run_moetune(job("resumed", two_ranks + " --resume"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_difference(dir_ / "resumed" / "final-model", dir_ / "two" / "final-model"), 0.0);
}

TEST_F(ParallelFinetune, BadLayoutsAreClearErrors) {
  const testing::RunResult zero = testing::run_moetune(job("zero", "--nproc-per-node 0"));
  EXPECT_NE(zero.status, 0);
  EXPECT_NE(zero.output.find("--nproc-per-node 0: it must be at least 1"), std::string::npos) << zero.output;
  const testing::RunResult experts = testing::run_moetune(job("experts", "--nproc-per-node 2 --set parallel.expert=3"));
  EXPECT_NE(experts.status, 0);
  EXPECT_NE(experts.output.find("parallel.expert 3 does not divide the world size 2"), std::string::npos) << experts.output;
  EXPECT_NE(experts.output.find("rank "), std::string::npos) << experts.output;
  const testing::RunResult alone = testing::run_moetune(job("alone", "--set parallel.expert=2"));
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.output.find("parallel.expert 2 does not divide the world size 1"), std::string::npos) << alone.output;
}

// The GPU engine's ranks without GPUs: each says so with its rank, and the launcher stops the job (no hang).
TEST_F(ParallelFinetune, GpuRanksWithoutAGpuAreAClearError) {
  if (cuda_device_count() >= 2) GTEST_SKIP() << "this machine has GPUs for the ranks";
  const testing::RunResult result = testing::run_moetune(job("gpu", "--nproc-per-node 2 --set training.device=cuda"));
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("rank "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("stopping the other ranks"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace moetune
