// The trainer queues step N on the GPU engine before it reads step N-1's numbers back (TrainingEngine's
// queue_forward_backward / queue_optimizer_step / finish_step), so the GPU never waits for the host between
// steps. With training.profile the loop waits for each step at once; both must log the same numbers, validate
// and checkpoint the same states, and a run stopped and resumed at a queued step must end where the whole run
// ends, bit for bit.
#include <gtest/gtest.h>

#include "moetune/model/checkpoint.h"
#include "train/trainer_fixture.h"

namespace moetune::train {
namespace {

class QueuedStepsGpu : public testing::GpuTrainerTest {
 protected:
  Recipe job(const std::string& output, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {"training.device=cuda", "logging.validation_every=2", "output.save_every=3",
                                          "optimizer.max_grad_norm=0.5"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return recipe(output, overrides);
  }
};

void expect_same_parameters(const std::filesystem::path& a, const std::filesystem::path& b) {
  const model::ModelWeights left = model::load_checkpoint(a), right = model::load_checkpoint(b);
  ASSERT_EQ(left.parameters.size(), right.parameters.size());
  for (size_t i = 0; i < left.parameters.size(); ++i)
    EXPECT_TRUE(left.parameters[i].same_bytes(right.parameters[i])) << left.layout.parameters[i].name;
}

TEST_F(QueuedStepsGpu, LogValidateAndSaveWhatTheWaitingLoopDoes) {
  const TrainResult queued = Trainer(job("queued"), {}, false).run();
  const TrainResult waiting = Trainer(job("waiting", {"training.profile=true"}), {}, false).run();
  const std::vector<json> q = metrics("queued"), w = metrics("waiting");
  ASSERT_EQ(q.size(), w.size());
  int steps = 0, validations = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i) + ": " + q[i].dump());
    ASSERT_EQ(q[i].contains("grad_norm"), w[i].contains("grad_norm"));
    EXPECT_EQ(q[i]["step"], w[i]["step"]);
    EXPECT_EQ(q[i]["loss"], w[i]["loss"]);  // the same doubles: one step's numbers, read late or at once
    if (!q[i].contains("grad_norm")) {
      ++validations;
      continue;
    }
    EXPECT_EQ(q[i]["step"].get<int>(), ++steps);
    EXPECT_EQ(q[i]["grad_norm"], w[i]["grad_norm"]);
    EXPECT_EQ(q[i]["moe"], w[i]["moe"]);
    EXPECT_EQ(q[i]["epoch"], w[i]["epoch"]);
    EXPECT_GT(q[i]["step_seconds"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(validations, 3);  // after steps 2 and 4, and the final one
  for (const char* checkpoint : {"checkpoint-000003", "checkpoint-000006"})
    expect_same_parameters(dir_ / "queued" / checkpoint, dir_ / "waiting" / checkpoint);
  expect_same_parameters(queued.final_model, waiting.final_model);
}

TEST_F(QueuedStepsGpu, AStopAtAQueuedStepResumesToTheWholeRunsModel) {
  const TrainResult whole = Trainer(job("whole"), {}, false).run();
  {
    Trainer first(job("split"), {}, false);
    first.stop_after(4);
    EXPECT_TRUE(first.run().interrupted);
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ / "split" / "checkpoint-000004"));
  const TrainResult rest = Trainer(job("split"), {}, /*resume=*/true).run();
  EXPECT_EQ(rest.steps, 6);
  expect_same_parameters(rest.final_model, whole.final_model);
  EXPECT_EQ(testing::losses(metrics("split")), testing::losses(metrics("whole")));
}

}  // namespace
}  // namespace moetune::train
