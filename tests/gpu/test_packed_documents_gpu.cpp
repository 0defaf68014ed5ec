// A packed row is its documents side by side: on the GPU engine, the gradients of the parity fixtures' packed row
// (tests/reference/make_parity.py: two documents of 7 and 5 tokens, positions restarting) must be the documents'
// gradients run alone, each weighted by its share of the scored tokens (the cross-entropy is a mean over them; the
// aux loss, which mixes the documents' router statistics, is left off). Every mixer restarts at a document start,
// so any difference is the bf16 rounding of other batch shapes, unless a kernel lets one document see the other.
// Beside it, each document run alone against the CPU engine on the same bf16 weights (every router the CPU runs
// forced to the GPU's choices, as tests/gpu/test_model_parity.cpp does): printed, with the packed row's, to tell a
// packing fault from a model that is bf16-sensitive on any batch.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/cuda/causal_lm.h"
#include "parity_batch.h"
#include "test_util.h"

namespace moetune::model {
namespace {

// bf16 rounds a batch of other shapes differently (GEMM tiles, the cross-entropy's mean, attention's blocks). Measured
// (H100, session 42, all 38 fixtures): the worst gradient 4.6e-2 (granitemoehybrid_tiny's layers.0.mamba.d), then
// qwen3_next_tiny 3.7e-2 and dots1_tiny 3.5e-2, every other fixture at most 2.6e-2.
constexpr double kPackedAgainstDocuments = 1e-1;

using Gradients = std::vector<Tensor>;  // CPU F32, one per trainable parameter in layout order

// The packed batch cut at its position restarts into one batch per document (no position ids: 0..n-1).
std::vector<Batch> documents_of(const Batch& packed) {
  const int64_t n = packed.input_ids.numel();
  const int64_t* positions = packed.position_ids.data<int64_t>();
  std::vector<Batch> documents;
  for (int64_t begin = 0; begin < n;) {
    int64_t end = begin + 1;
    while (end < n && positions[end] != 0) ++end;
    const int64_t* ids = packed.input_ids.data<int64_t>() + begin;
    const int64_t* labels = packed.labels.data<int64_t>() + begin;
    Batch document;
    document.input_ids = Tensor::from_vector(std::vector<int64_t>(ids, ids + (end - begin)), {1, end - begin});
    document.labels = Tensor::from_vector(std::vector<int64_t>(labels, labels + (end - begin)), {1, end - begin});
    document.output_router_logits = false;
    documents.push_back(std::move(document));
    begin = end;
  }
  return documents;
}

class PackedDocumentsGpu : public testing::GpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    folder_ = testing::fixture(GetParam());
    const io::SafetensorsFile reference = io::SafetensorsFile::open(folder_ / "parity.safetensors");
    packed_ = testing::parity_batch(reference, "packed");
    packed_.output_router_logits = false;
  }

  // Either engine's gradients of its trainable parameters, as CPU F32 copies.
  template <typename Model>
  static Gradients trainable_gradients(Model& model) {
    Gradients grads;
    const auto& specs = model.weights().layout.parameters;
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].trainable) grads.push_back(testing::to_cpu_f32(model.parameters().grads()[i]));
    return grads;
  }

  // The GPU's gradients of one batch and the tokens its cross-entropy scored.
  static Gradients gpu_gradients(cuda::CausalLM& model, const Batch& batch, int64_t* scored) {
    model.zero_grad();
    *scored = model.forward_backward(batch).num_tokens;
    return trainable_gradients(model);
  }

  // The CPU engine's (on the fixture's weights rounded to bf16), routed as the GPU routes the batch.
  static Gradients cpu_gradients(CausalLM& cpu, cuda::CausalLM& gpu, const Batch& batch) {
    if (testing::forces_routing(cpu.spec())) cpu.force_routing(gpu.routing_choices(batch));
    cpu.zero_grad();
    cpu.forward(batch);
    cpu.backward();
    return trainable_gradients(cpu);
  }

  // The worst relative error over the parameters, printed with its name and any above `shown`.
  static double worst(const std::string& label, const Gradients& actual, const Gradients& expected,
                      const std::vector<std::string>& names, double shown) {
    double most = 0;
    std::string most_name;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double error = testing::relative_error(actual[i], expected[i]);
      if (error > shown) std::printf("  %s: %s %.3e\n", label.c_str(), names[i].c_str(), error);
      if (error > most) most = error, most_name = names[i];
    }
    std::printf("%s: worst gradient %.3e (%s)\n", label.c_str(), most, most_name.c_str());
    return most;
  }

  std::filesystem::path folder_;
  Batch packed_;
};

TEST_P(PackedDocumentsGpu, PackedRowGradientsAreItsDocumentsGradients) {
  cuda::CausalLM model = cuda::CausalLM::from_pretrained(folder_);
  CausalLM cpu = testing::cpu_on_bf16_weights(folder_);
  std::vector<std::string> names;
  for (const auto& spec : model.weights().layout.parameters)
    if (spec.trainable) names.push_back(spec.name);

  int64_t packed_scored = 0;
  const Gradients packed = gpu_gradients(model, packed_, &packed_scored);
  Gradients summed;
  int64_t scored_total = 0;
  const std::vector<Batch> documents = documents_of(packed_);
  ASSERT_EQ(documents.size(), 2u) << GetParam();
  for (size_t d = 0; d < documents.size(); ++d) {
    int64_t scored = 0;
    const Gradients alone = gpu_gradients(model, documents[d], &scored);
    scored_total += scored;
    if (summed.empty())
      for (const Tensor& g : alone) summed.push_back(Tensor::zeros(g.shape(), DType::F32));
    for (size_t i = 0; i < alone.size(); ++i) {
      float* to = summed[i].data<float>();
      const float* from = alone[i].data<float>();
      for (int64_t e = 0; e < alone[i].numel(); ++e) to[e] += float(scored) * from[e];
    }
    const std::string label = GetParam() + " document " + std::to_string(d) + " alone, gpu against cpu";
    worst(label, alone, cpu_gradients(cpu, model, documents[d]), names, kPackedAgainstDocuments);
  }
  ASSERT_EQ(scored_total, packed_scored) << GetParam() << ": the documents score other tokens than the packed row";
  for (Tensor& g : summed) {
    float* to = g.data<float>();
    for (int64_t e = 0; e < g.numel(); ++e) to[e] /= float(packed_scored);
  }
  worst(GetParam() + " packed, gpu against cpu", packed, cpu_gradients(cpu, model, packed_), names,
        kPackedAgainstDocuments);
  const double error =
      worst(GetParam() + " packed against its documents, gpu", packed, summed, names, kPackedAgainstDocuments);
  EXPECT_LE(error, kPackedAgainstDocuments) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedDocumentsGpu, ::testing::ValuesIn(testing::parity_fixtures()));

}  // namespace
}  // namespace moetune::model
