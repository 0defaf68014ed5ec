// The CPU Mamba2 mixer against transformers 5.17's NemotronHMamba2Mixer (torch path, fp32; the fixture is made by
// tests/reference/make_mamba2_fixture.py): output, d(input) and every weight's gradient at 1e-5 relative, for a
// plain batch, a padded one (left and right) and a packed one (documents restarting the conv and the state).
#include <gtest/gtest.h>

#include "moetune/io/safetensors.h"
#include "moetune/model/mamba2_mixer.h"
#include "test_util.h"

namespace moetune::model {
namespace {

constexpr int64_t kBatch = 2, kSeq = 7;

Mamba2Spec fixture_spec() {
  Mamba2Spec spec;
  spec.num_heads = 4, spec.head_dim = 4, spec.num_groups = 2, spec.state_size = 8, spec.conv_kernel = 4;
  spec.conv_bias = true, spec.proj_bias = false, spec.dt_min = 0.1, spec.norm_eps = 1e-5;
  return spec;
}

// HF names, in Mamba2Weights' order (conv1d.weight's middle dimension of 1 dropped by the view).
const char* const kNames[] = {"in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
                              "norm.weight",    "out_proj.weight"};

std::vector<Tensor*> slots(Mamba2Weights& w) {
  return {&w.in_proj, &w.conv, &w.conv_bias, &w.dt_bias, &w.a_log, &w.d, &w.norm, &w.out_proj};
}

Tensor flat(const Tensor& t, int64_t rows) { return t.clone().view({rows, -1}); }

void check_case(const std::string& name) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(testing::fixture("nemotron_h_mamba2") / "mamba2.safetensors");
  const Mamba2Spec spec = fixture_spec();
  Mamba2Weights weights, grads;
  std::vector<Tensor*> w = slots(weights), g = slots(grads);
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor hf = file.tensor(kNames[i]);
    *w[i] = std::string(kNames[i]) == "conv1d.weight" ? flat(hf, hf.size(0)) : hf.clone();
    *g[i] = Tensor::zeros(w[i]->shape(), DType::F32);
  }
  const Tensor ids = Tensor::zeros({kBatch, kSeq}, DType::I64);
  const Tensor positions = file.contains(name + ".position_ids") ? file.tensor(name + ".position_ids") : Tensor();
  const Tensor mask = file.contains(name + ".attention_mask") ? file.tensor(name + ".attention_mask") : Tensor();
  const Mamba2Rows rows = mamba2_rows(sequence_layout(ids, positions, mask));
  const int64_t tokens = kBatch * kSeq;
  Mamba2Stash stash;
  const Tensor out = mamba2_mixer_forward(spec, weights, flat(file.tensor(name + ".x"), tokens), rows, &stash);
  EXPECT_LE(testing::relative_error_f32(out, file.tensor(name + ".out")), 1e-5) << name << " out";
  const Tensor dx = mamba2_mixer_backward(spec, weights, flat(file.tensor(name + ".g"), tokens), stash, rows, grads);
  EXPECT_LE(testing::relative_error_f32(dx, file.tensor(name + ".dx")), 1e-5) << name << " dx";
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_LE(testing::relative_error_f32(*g[i], file.tensor(name + ".grad." + kNames[i])), 1e-5)
        << name << " d" << kNames[i];
}

// Restarts: each row's first token, each packed document, and both edges of padding.
TEST(Mamba2Rows, StartAtRowsDocumentsAndPaddingEdges) {
  const Tensor ids = Tensor::zeros({2, 4}, DType::I64);
  const Tensor positions = Tensor::from_vector<int64_t>({0, 1, 0, 1, 0, 1, 2, 3}, {2, 4});
  const Tensor mask = Tensor::from_vector<int64_t>({1, 1, 1, 1, 0, 1, 1, 0}, {2, 4});
  const Mamba2Rows rows = mamba2_rows(sequence_layout(ids, positions, mask));
  EXPECT_EQ(rows.starts, (ops::DocumentStarts{1, 0, 1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(rows.valid, (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 1, 0}));
}

TEST(Mamba2MixerParity, PlainBatch) { check_case("plain"); }
TEST(Mamba2MixerParity, PaddedBatch) { check_case("padded"); }
TEST(Mamba2MixerParity, PackedDocuments) { check_case("packed"); }

}  // namespace
}  // namespace moetune::model
