// Every execution plan cuDNN offers for one attention graph, each built and runnable by index: the timing study
// behind the engine's choice of layout (tests/gpu/test_mla_gpu.cpp's DISABLED_TimesAttentionPlans). The engine
// itself runs the heuristic's first plan (attention.cpp); this is how one sees what else there is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/attention_graph.h"

namespace moetune::ops::cuda {

// Where the candidate plans come from: one of cuDNN's heuristic modes, or every engine cuDNN has for the graph
// (its global engine ids) with every combination of its knobs.
enum class PlanSource : uint8_t { kHeuristicA, kHeuristicB, kFallback, kEveryEngine };

const char* plan_source_name(PlanSource source);

// The tensors of attention.h's calls, token-major; the forward pass reads q, k, v and writes out and stats, the
// backward pass reads all but dq, dk, dv, which it writes.
struct AttentionTensors {
  Tensor q, k, v, out, stats, dout, dq, dk, dv;
};

class AttentionPlans {
 public:
  // Builds the operation graph for `key` (throws Error when cuDNN refuses it) and every plan `source` offers,
  // keeping those that fail to build with why.
  AttentionPlans(const attention_graph::GraphKey& key, PlanSource source);
  ~AttentionPlans();
  AttentionPlans(const AttentionPlans&) = delete;
  AttentionPlans& operator=(const AttentionPlans&) = delete;

  int64_t count() const;
  const std::string& label(int64_t i) const;  // cuDNN's name for the plan, with its engine id and knobs if chosen
  const std::string& error(int64_t i) const;  // empty when the plan built
  size_t workspace_bytes(int64_t i) const;
  // Lines describing the engines and their knobs (kEveryEngine; empty otherwise).
  const std::vector<std::string>& notes() const;

  // Queues plan i on gpu::stream() over `t` (the scratch is allocated and freed stream-ordered).
  void run(int64_t i, const AttentionTensors& t, const PackedDocuments& docs, double scale) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moetune::ops::cuda
