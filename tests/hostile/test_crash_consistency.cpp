// Kills a training run with SIGKILL at random moments (a checkpoint is written every step, so many land inside
// a checkpoint write), resumes it until it finishes, and checks that it ends with bitwise the weights and state
// of a run never interrupted. Bounded for CI; MOETUNE_CRASH_KILLS sets how many kills (and MOETUNE_FUZZ_SEED
// the seed) for a longer run.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "moetune/train/trainer.h"
#include "fuzz_util.h"
#include "test_util.h"

extern char** environ;

namespace moetune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int kills_wanted() {
  if (const char* text = std::getenv("MOETUNE_CRASH_KILLS")) return std::atoi(text);
  return MOETUNE_SANITIZED ? 4 : 12;
}

// Starts `moetune finetune` with `arguments`, its output going to `log`.
pid_t start_finetune(const std::vector<std::string>& arguments, const fs::path& log) {
  std::vector<std::string> words = {MOETUNE_BINARY, "finetune"};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(error, 0);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(CrashConsistency, KilledAndResumedRunsEndBitwiseEqualToAnUninterruptedOne) {
  testing::ScratchDir dir;
  std::string lines;
  for (int i = 0; i < 40; ++i) {
    lines += "{\"input_ids\": [";
    for (int t = 0; t < 5 + i % 7; ++t) lines += (t ? ", " : "") + std::to_string((i * 13 + t * 7) % 90 + 2);
    lines += "]}\n";
  }
  testing::write_file(dir / "train.jsonl", lines);
  testing::write_file(dir / "recipe.yaml", "model: " + testing::fixture("qwen3_moe_tiny").string() +
                                               "\ndata:\n  train: " + (dir / "train.jsonl").string() +
                                               "\n  max_length: 16\ntraining:\n  micro_batch_size: 2\n  max_steps: 12\n"
                                               "  device: cpu\noptimizer:\n  lr: 1.0e-2\noutput:\n  save_every: 1\n"
                                               "  keep_last: 2\nlogging:\n  tensorboard: false\n");
  const auto arguments = [&](const std::string& output) {
    return std::vector<std::string>{"-c", (dir / "recipe.yaml").string(), "--set", "output.dir=" + (dir / output).string()};
  };

  const auto start = Clock::now();
  ASSERT_EQ(wait_for(start_finetune(arguments("whole"), dir / "whole.log")), 0) << testing::read_file(dir / "whole.log");
  const auto whole_run = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);

  // Rounds of kill-and-resume, each in a fresh folder, until enough kills landed (a run that finishes before its
  // kill ends its round).
  std::mt19937 rng(testing::fuzz_seed());
  int kills = 0, runs = 0;
  for (int round = 0; kills < kills_wanted(); ++round) {
    const std::string output = "crashed-" + std::to_string(round);
    while (true) {
      std::vector<std::string> run = arguments(output);
      if (!train::list_checkpoints(dir / output).empty()) run.push_back("--resume");
      const pid_t pid = start_finetune(run, dir / "crashed.log");
      ++runs;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % uint64_t(whole_run.count())));
      kill(pid, SIGKILL);
      const int status = wait_for(pid);
      if (WIFSIGNALED(status)) {
        ++kills;
        continue;
      }
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::read_file(dir / "crashed.log");
      break;
    }
    for (const char* file : {"model.safetensors", "training_state/training_state.safetensors"})
      EXPECT_EQ(testing::read_file(dir / output / "checkpoint-000012" / file),
                testing::read_file(dir / "whole" / "checkpoint-000012" / file))
          << output << "/" << file;
  }
  std::printf("crash consistency: seed %u, %d kills over %d runs\n", testing::fuzz_seed(), kills, runs);
}

}  // namespace
}  // namespace moetune
