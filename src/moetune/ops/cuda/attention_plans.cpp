// cuDNN's candidate plans for one attention graph, built one by one so that a plan cuDNN cannot build is
// recorded rather than fatal.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "moetune/ops/cuda/attention_plans.h"

#include <algorithm>
#include <unordered_map>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/cudnn_handle.h"

namespace moetune::ops::cuda {
namespace {

namespace fe = cudnn_frontend;
using attention_graph::GraphKey;

constexpr int kMaxKnobCombinations = 512;  // per engine

std::string message(fe::error_t status) { return status.is_bad() ? status.get_message() : std::string(); }

}  // namespace

const char* plan_source_name(PlanSource source) {
  switch (source) {
    case PlanSource::kHeuristicA: return "heuristic A";
    case PlanSource::kHeuristicB: return "heuristic B";
    case PlanSource::kFallback: return "fallback";
    case PlanSource::kEveryEngine: return "every engine";
  }
  return "?";
}

struct AttentionPlans::State {
  GraphKey key;
  std::shared_ptr<fe::graph::Graph> graph;
  std::vector<std::string> labels, errors, notes;
  std::vector<size_t> workspaces;
  std::vector<int64_t> graph_index;  // each plan's index among the graph's execution plans

  // Appends the plans enqueued since `first`, building each.
  void build_from(int64_t first, const std::string& suffix) {
    for (int64_t i = first; i < graph->get_execution_plan_count(); ++i) {
      std::string name;
      (void)graph->get_plan_name_at_index(i, name);
      std::string error = message(graph->build_plan_at_index(i));
      int64_t workspace = 0;
      if (error.empty()) error = message(graph->get_workspace_size_plan_at_index(i, workspace));
      labels.push_back(name + suffix);
      graph_index.push_back(i);
      errors.push_back(error);
      workspaces.push_back(size_t(std::max<int64_t>(workspace, 0)));
    }
  }

  // Every engine cuDNN lists for the graph, with every combination of its knobs' values (each knob over its whole
  // range by its stride; the first kMaxKnobCombinations combinations): cuDNN's engines take no default knobs for
  // attention, and its heuristics name one combination; the others are what this looks for.
  void every_engine() {
    int64_t engines = 0;
    attention_graph::check(graph->get_engine_count(engines), "the engine count", key);
    for (int64_t e = 0; e < engines; ++e) {
      std::vector<fe::Knob> knobs;
      const std::string knob_error = message(graph->get_knobs_for_engine(e, knobs));
      if (!knob_error.empty()) {
        notes.push_back(fmt::format("engine {}: no knobs ({})", e, knob_error.substr(0, 100)));
        continue;
      }
      std::string line = fmt::format("engine {}: knobs", e);
      for (const fe::Knob& k : knobs)
        line += fmt::format(" type {} [{}, {}] step {};", int(k.type), k.minValue, k.maxValue, k.stride);
      std::vector<int64_t> choice(knobs.size());
      for (size_t i = 0; i < knobs.size(); ++i) choice[i] = knobs[i].minValue;
      int tried = 0, created = 0;
      for (bool more = true; more && tried < kMaxKnobCombinations; ++tried) {
        std::unordered_map<fe::KnobType_t, int64_t> values;
        std::string suffix = fmt::format(" [engine {}", e);
        for (size_t i = 0; i < knobs.size(); ++i) {
          values[knobs[i].type] = choice[i];
          suffix += fmt::format(", knob {} = {}", int(knobs[i].type), choice[i]);
        }
        const int64_t first = graph->get_execution_plan_count();
        if (message(graph->create_execution_plan(e, values)).empty()) {
          ++created;
          build_from(first, suffix + "]");
        }
        // The next combination, the last knob fastest.
        more = false;
        for (size_t i = knobs.size(); i-- > 0;) {
          choice[i] += std::max<int64_t>(knobs[i].stride, 1);
          if (choice[i] <= knobs[i].maxValue) {
            more = true;
            break;
          }
          choice[i] = knobs[i].minValue;
        }
      }
      notes.push_back(fmt::format("{} {} of {} combinations tried created a plan{}", line, created, tried,
                                  tried == kMaxKnobCombinations ? " (stopped at the cap)" : ""));
    }
  }
};

AttentionPlans::AttentionPlans(const GraphKey& key, PlanSource source) : state_(std::make_unique<State>()) {
  state_->key = key;
  state_->graph = attention_graph::operation_graph(key);
  switch (source) {
    case PlanSource::kEveryEngine: state_->every_engine(); return;
    case PlanSource::kHeuristicA:
    case PlanSource::kHeuristicB:
    case PlanSource::kFallback: {
      const fe::HeurMode_t mode = source == PlanSource::kHeuristicA   ? fe::HeurMode_t::A
                                  : source == PlanSource::kHeuristicB ? fe::HeurMode_t::B
                                                                      : fe::HeurMode_t::FALLBACK;
      const std::string error = message(state_->graph->create_execution_plans({mode}));
      if (!error.empty()) state_->notes.push_back(fmt::format("{}: {}", plan_source_name(source), error));
      state_->build_from(0, "");
      return;
    }
  }
}

AttentionPlans::~AttentionPlans() = default;

int64_t AttentionPlans::count() const { return int64_t(state_->labels.size()); }
const std::string& AttentionPlans::label(int64_t i) const { return state_->labels.at(size_t(i)); }
const std::string& AttentionPlans::error(int64_t i) const { return state_->errors.at(size_t(i)); }
size_t AttentionPlans::workspace_bytes(int64_t i) const { return state_->workspaces.at(size_t(i)); }
const std::vector<std::string>& AttentionPlans::notes() const { return state_->notes; }

void AttentionPlans::run(int64_t i, const AttentionTensors& t, const PackedDocuments& docs, double scale) const {
  const GraphKey& key = state_->key;
  MOETUNE_CHECK(error(i).empty(), "attention plan {} ({}) did not build: {}", i, label(i), error(i));
  using namespace attention_graph;
  VariantPack pack{{kQ, t.q.raw_data()}, {kK, t.k.raw_data()}, {kV, t.v.raw_data()}, {kO, t.out.raw_data()},
                   {kStats, t.stats.raw_data()}};
  if (key.backward) {
    pack[kDO] = t.dout.raw_data();
    pack[kDQ] = t.dq.raw_data();
    pack[kDK] = t.dk.raw_data();
    pack[kDV] = t.dv.raw_data();
  }
  const size_t inputs = inputs_bytes(key);
  Tensor scratch = Tensor::empty({int64_t(inputs + workspace_bytes(i))}, DType::U8, Device::cuda());
  char* base = static_cast<char*>(scratch.raw_data());
  float scale_value = float(scale);
  add_call_inputs(key, docs, scale_value, base, pack);
  check(state_->graph->execute_plan_at_index(cudnn_handle(), pack, base + inputs, state_->graph_index.at(size_t(i))),
        "execution", key);
  gpu::check(cudaGetLastError(), fmt::format("attention plan {} ({})", i, label(i)));
}

}  // namespace moetune::ops::cuda
