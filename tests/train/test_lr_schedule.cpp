// Learning-rate schedules against transformers' get_{constant,linear,cosine}_schedule_with_warmup (5.17) with
// peak 2.0, 3 warm-up steps and 10 in all: the rate each optimizer step uses, step 0 first.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/train/lr_schedule.h"

namespace moetune::train {
namespace {

void expect_rates(ScheduleKind kind, const std::vector<double>& expected) {
  const LrSchedule schedule{kind, 2.0, 3, 10, 0.0};
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_NEAR(schedule.lr(int64_t(step)), expected[step], 1e-12) << "step " << step;
}

TEST(LrSchedule, ConstantWithWarmup) {
  expect_rates(ScheduleKind::Constant, {0.0, 0.6666666666666666, 1.3333333333333333, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0});
}

TEST(LrSchedule, LinearWithWarmup) {
  expect_rates(ScheduleKind::Linear, {0.0, 0.6666666666666666, 1.3333333333333333, 2.0, 1.7142857142857142,
                                      1.4285714285714286, 1.1428571428571428, 0.8571428571428571, 0.5714285714285714,
                                      0.2857142857142857, 0.0, 0.0});
}

TEST(LrSchedule, CosineWithWarmup) {
  expect_rates(ScheduleKind::Cosine, {0.0, 0.6666666666666666, 1.3333333333333333, 2.0, 1.900968867902419,
                                      1.6234898018587336, 1.2225209339563143, 0.7774790660436857, 0.3765101981412665,
                                      0.09903113209758097, 0.0});
  // Past the last step transformers' cosine rises again (it is periodic); moetune's stays at its floor.
  EXPECT_EQ((LrSchedule{ScheduleKind::Cosine, 2.0, 3, 10, 0.0}.lr(11)), 0.0);
  EXPECT_NEAR((LrSchedule{ScheduleKind::Cosine, 2.0, 3, 10, 0.1}.lr(10)), 0.2, 1e-12);
}

TEST(LrSchedule, UnknownNameListsTheKnownOnes) {
  try {
    schedule_kind("exponential");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("constant, linear, cosine"), std::string::npos);
  }
}

}  // namespace
}  // namespace moetune::train
