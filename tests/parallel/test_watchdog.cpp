// A rank that stops making progress ends itself with a message naming what it waited for, instead of waiting
// in a collective forever; progress keeps it alive.
#include <gtest/gtest.h>

#include <thread>

#include "moetune/parallel/watchdog.h"

namespace moetune {
namespace {

TEST(WatchdogDeathTest, NoProgressEndsTheRank) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        parallel::Watchdog watchdog(1.0);
        watchdog.progress("a training step");
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(3), "no progress for [0-9]+ s during a training step");
}

TEST(Watchdog, ProgressKeepsTheRankAlive) {
  parallel::Watchdog watchdog(1.5);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    watchdog.progress("a training step");
  }
  SUCCEED();  // still here after 3 s with a 1.5 s timeout
}

}  // namespace
}  // namespace moetune
