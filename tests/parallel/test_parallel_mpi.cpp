// Expert and data parallelism on the CPU engine, run under `mpirun -np 2` and `-np 4` (ctest does both): for
// every expert-parallel size the world allows, N ranks each training A micro-batches per step must compute
// what one rank computes with accumulation N·A (the reference, which every rank also runs alone): the same
// losses, gradient norms and, after three AdamW steps, the same weights, read back from the HF folder the
// ranks write together (each rank its experts, rank 0 the dense tensors and the index).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "moetune/model/checkpoint.h"
#include "moetune/parallel/parallel_layout.h"
#include "moetune/parallel/world.h"
#include "moetune/train/engine.h"
#include "mpi_world.h"

namespace moetune {

std::shared_ptr<parallel::Communicator> g_world;

namespace {

namespace fs = std::filesystem;

const char* kModel = MOETUNE_FIXTURES_DIR "/qwen3_moe_tiny";

// Micro-batch `index` of a fixed synthetic stream: two rows of 12 tokens, the second padded, some labels
// masked, so normalising by the step's scored tokens matters.
model::Batch micro_batch(int64_t index, int64_t vocab) {
  std::mt19937_64 random(uint64_t(1000 + index));
  const int64_t rows = 2, seq = 12;
  std::vector<int64_t> ids(size_t(rows * seq)), labels(ids.size()), mask(ids.size(), 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t(random() % uint64_t(vocab));
    labels[i] = random() % 5 == 0 ? -100 : ids[i];
  }
  const int64_t padding = 1 + int64_t(index % 4);
  for (int64_t t = seq - padding; t < seq; ++t) {
    mask[size_t(seq + t)] = 0;
    labels[size_t(seq + t)] = -100;
  }
  model::Batch batch;
  batch.input_ids = Tensor::from_vector(ids, {rows, seq});
  batch.labels = Tensor::from_vector(labels, {rows, seq});
  batch.attention_mask = Tensor::from_vector(mask, {rows, seq});
  batch.output_router_logits = true;  // the aux loss too: its convention must match one rank's
  return batch;
}

int64_t scored_tokens(const model::Batch& batch) {
  int64_t scored = 0;
  const Tensor& labels = batch.labels;
  for (int64_t r = 0; r < labels.size(0); ++r)
    for (int64_t t = 1; t < labels.size(1); ++t) scored += labels.data<int64_t>()[r * labels.size(1) + t] != -100;
  return scored;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// The largest ‖a - b‖ / ‖b‖ over the tensors of two folders. Per tensor, not per element: summing the same
// rows in another order (one rank's four GEMMs vs the expert's one over all ranks' rows) moves a gradient by
// ~1e-7 of itself, and AdamW's m / √v turns that into a larger change of the few elements whose gradient
// nearly cancels (seen: 4.5e-6 of one element of 1.9 after three steps at lr 1e-3).
double weight_difference(const fs::path& a, const fs::path& b) {
  const model::ModelWeights x = model::load_checkpoint(a), y = model::load_checkpoint(b);
  double worst = 0;
  for (size_t i = 0; i < x.parameters.size(); ++i) {
    const float* p = x.parameters[i].data<float>();
    const float* q = y.parameters[i].data<float>();
    double difference = 0, norm = 1e-30;
    for (int64_t j = 0; j < x.parameters[i].numel(); ++j) {
      difference += (double(p[j]) - q[j]) * (double(p[j]) - q[j]);
      norm += double(q[j]) * q[j];
    }
    worst = std::max(worst, std::sqrt(difference / norm));
  }
  return worst;
}

void check_matches_one_rank(int expert, int64_t accumulation) {
  const int world = g_world->size(), rank = g_world->rank();
  const train::Recipe recipe = train::parse_recipe(
      "", "test", {std::string("model=") + kModel, "training.device=cpu", "optimizer.lr=1e-3", "optimizer.weight_decay=0.1",
                   "optimizer.max_grad_norm=0.05"});
  auto groups = std::make_shared<parallel::ParallelGroups>(parallel::make_groups(g_world, expert, 4));
  auto engine = train::make_cpu_engine(recipe, groups);
  auto reference = train::make_cpu_engine(recipe);  // one rank, accumulation world · A
  const int64_t vocab = engine->spec().vocab_size;
  int64_t next = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<model::Batch> batches;
    int64_t scored = 0;
    for (int64_t i = 0; i < world * accumulation; ++i) {
      batches.push_back(micro_batch(next++, vocab));
      scored += scored_tokens(batches.back());
    }
    double reference_loss = 0, loss = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      batches[i].num_items_in_batch = double(scored);
      const model::CausalLMOutput out = reference->forward_backward(batches[i]);
      reference_loss += out.lm_loss + 0.01 * out.aux_loss;
      if (int64_t(i) / accumulation == rank) {
        const model::CausalLMOutput mine = engine->forward_backward(batches[i]);
        loss += mine.lm_loss + 0.01 * mine.aux_loss;
      }
    }
    loss = g_world->all_reduce_sum(std::vector<double>{loss})[0];
    const double reference_norm = reference->optimizer_step(1e-3, 0.05);
    const double norm = engine->optimizer_step(1e-3, 0.05);
    EXPECT_LT(relative(loss, reference_loss), 1e-6) << "step " << step << ": " << loss << " vs " << reference_loss;
    EXPECT_LT(relative(norm, reference_norm), 1e-6) << "step " << step << ": " << norm << " vs " << reference_norm;
  }
  // The folder the ranks write together loads whole and holds the one-rank run's weights.
  const fs::path root = fs::temp_directory_path() / fmt::format("moetune-mpi-{}-{}", ::getppid(), expert);
  if (rank == 0) fs::remove_all(root);
  g_world->barrier();
  engine->save_pretrained(root / "ranks");
  if (rank == 0) reference->save_pretrained(root / "one");
  g_world->barrier();
  if (expert > 1) {
    EXPECT_TRUE(fs::exists(root / "ranks" / "model.safetensors.index.json"));
  }
  EXPECT_LT(weight_difference(root / "ranks", root / "one"), 1e-6);
  g_world->barrier();
  if (rank == 0) fs::remove_all(root);
}

TEST(ParallelMpi, DataParallelMatchesAccumulation) { check_matches_one_rank(1, 1); }

TEST(ParallelMpi, ExpertParallelTwoMatchesAccumulation) {
  if (g_world->size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  check_matches_one_rank(2, 2);
}

TEST(ParallelMpi, ExpertParallelOverWholeWorldMatchesAccumulation) {
  if (4 % g_world->size() != 0) GTEST_SKIP() << "the fixture's 4 experts do not split over this world";
  check_matches_one_rank(g_world->size(), 1);
}

TEST(ParallelMpi, ExpertSizeThatDoesNotDivideIsRefused) {
  EXPECT_THROW(parallel::make_groups(g_world, 3, 4), Error);
  try {
    parallel::make_layout(g_world->size(), g_world->rank(), 8, 4);
    FAIL() << "8 does not divide 4 experts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.expert"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const moetune::parallel::LaunchInfo launch = moetune::parallel::detect_launch();
  if (launch.launcher != moetune::parallel::Launcher::Mpi) {
    std::fprintf(stderr, "run under mpirun -np 2 (or 4): ctest does\n");
    return 1;
  }
  moetune::g_world = moetune::parallel::mpi_world_communicator();
  const int status = RUN_ALL_TESTS();
  moetune::g_world.reset();
  return status;
}
