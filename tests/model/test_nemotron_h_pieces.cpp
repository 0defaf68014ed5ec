// The Nemotron-H CPU pieces composed into the whole model as NemotronHModel composes them (one pre-norm residual
// sublayer per layer: Mamba2, attention without RoPE, relu² MLP, latent MoE; then norm_f and lm_head), against
// the nemotron_h_tiny fixture (tests/reference/make_nemotron_h_fixtures.py): logits at real tokens, loss and every
// parameter's gradient at 1e-5, for the plain, padded and packed batches. The composition is written here by hand
// until the family runs these pieces through the engine's decoder; then the family's parity test replaces it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "moetune/io/safetensors.h"
#include "moetune/model/block_util.h"
#include "moetune/model/families/nemotron_h_config.h"
#include "moetune/model/latent_moe.h"
#include "moetune/model/mamba2_mixer.h"
#include "moetune/model/sequence_layout.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/embedding.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/loss.h"
#include "moetune/ops/norm.h"
#include "moetune/ops/relu_squared.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using Tensors = std::map<std::string, Tensor>;

std::filesystem::path folder() { return testing::fixture("nemotron_h_tiny"); }

// The checkpoint under transformers' in-memory names (model.*, experts stacked [E, ...]), fp32 copies.
Tensors load_weights(const NemotronHConfig& c) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(folder() / "model.safetensors");
  Tensors w;
  for (const NemotronHTensor& t : nemotron_h_tensors(c)) {
    std::string name = t.name.rfind("backbone.", 0) == 0 ? "model." + t.name.substr(9) : t.name;
    const size_t routed = name.find("mixer.experts.");
    if (routed == std::string::npos) {
      w[name] = file.tensor(t.name).clone();
      continue;
    }
    // model.layers.N.mixer.experts.E.up_proj.weight -> model.layers.N.mixer.experts.up_proj, row E
    const size_t index = routed + 14, dot = name.find('.', index);  // after "mixer.experts."
    const int64_t e = std::stoll(name.substr(index, dot - index));
    const std::string stacked = name.substr(0, index) + name.substr(dot + 1, name.size() - dot - 8);  // less ".weight"
    if (!w.count(stacked)) {
      Shape shape{c.num_experts};
      shape.insert(shape.end(), t.shape.begin(), t.shape.end());
      w[stacked] = Tensor::zeros(shape, DType::F32);
    }
    w[stacked][e].copy_from(file.tensor(t.name));
  }
  return w;
}

Tensors zeros_like(const Tensors& w) {
  Tensors g;
  for (const auto& [name, t] : w) g[name] = Tensor::zeros(t.shape(), DType::F32);
  return g;
}

Tensor find(const Tensors& t, const std::string& name) { return t.count(name) ? t.at(name) : Tensor(); }

Mamba2Weights mamba_weights(const Tensors& t, const std::string& m, int64_t channels) {
  const Tensor conv = find(t, m + "conv1d.weight");
  return {find(t, m + "in_proj.weight"), find(t, m + "in_proj.bias"),  conv.view({channels, -1}),
          find(t, m + "conv1d.bias"),    find(t, m + "dt_bias"),        find(t, m + "A_log"),
          find(t, m + "D"),              find(t, m + "norm.weight"),    find(t, m + "out_proj.weight"),
          find(t, m + "out_proj.bias")};
}

LatentMoeWeights moe_weights(const Tensors& t, const std::string& m) {
  return {find(t, m + "gate.weight"),
          find(t, m + "gate.e_score_correction_bias"),
          find(t, m + "experts.up_proj"),
          find(t, m + "experts.down_proj"),
          find(t, m + "shared_experts.up_proj.weight"),
          find(t, m + "shared_experts.up_proj.bias"),
          find(t, m + "shared_experts.down_proj.weight"),
          find(t, m + "shared_experts.down_proj.bias"),
          find(t, m + "fc1_latent_proj.weight"),
          find(t, m + "fc1_latent_proj.bias"),
          find(t, m + "fc2_latent_proj.weight"),
          find(t, m + "fc2_latent_proj.bias")};
}

// One sublayer's mixer, forward and backward, with what its backward needs.
struct Mixer {
  const NemotronHConfig& c;
  const SequenceLayout& layout;
  const Mamba2Rows& rows;
  NemotronHLayer kind;
  std::string prefix;  // "model.layers.N.mixer."
  Mamba2Stash mamba;
  LatentMoeStash moe;
  Tensor input, q, k, v, attended, hidden;

  Tensor forward(const Tensors& w, const Tensor& x) {
    input = x;
    const int64_t tokens = x.size(0);
    switch (kind) {
      case NemotronHLayer::Mamba2:
        return mamba2_mixer_forward(c.mamba, mamba_weights(w, prefix, c.mamba.conv_channels()), x, rows, &mamba);
      case NemotronHLayer::Moe: {
        const LatentMoeSpec spec{{c.top_k, c.num_groups, c.topk_groups, c.norm_topk_prob, c.routed_scaling_factor},
                                 c.moe_latent_size.has_value()};
        return latent_moe_forward(spec, moe_weights(w, prefix), x, &moe);
      }
      case NemotronHLayer::Mlp:
        hidden = ops::linear_forward(x, w.at(prefix + "up_proj.weight"));
        return ops::linear_forward(ops::relu_squared_forward(hidden), w.at(prefix + "down_proj.weight"));
      case NemotronHLayer::Attention:
        q = ops::linear_forward(x, w.at(prefix + "q_proj.weight")).view({tokens, c.num_heads, c.head_dim});
        k = ops::linear_forward(x, w.at(prefix + "k_proj.weight")).view({tokens, c.num_kv_heads, c.head_dim});
        v = ops::linear_forward(x, w.at(prefix + "v_proj.weight")).view({tokens, c.num_kv_heads, c.head_dim});
        attended = ops::causal_attention_forward(q, k, v, layout.mask, 1.0 / std::sqrt(double(c.head_dim)));
        return ops::linear_forward(attended.view({tokens, -1}), w.at(prefix + "o_proj.weight"));
    }
    return {};
  }

  Tensor backward(const Tensors& w, const Tensors& g, const Tensor& dy) {
    const int64_t tokens = dy.size(0);
    switch (kind) {
      case NemotronHLayer::Mamba2:
        return mamba2_mixer_backward(c.mamba, mamba_weights(w, prefix, c.mamba.conv_channels()), dy, mamba, rows,
                                     mamba_weights(g, prefix, c.mamba.conv_channels()));
      case NemotronHLayer::Moe: {
        const LatentMoeSpec spec{{c.top_k, c.num_groups, c.topk_groups, c.norm_topk_prob, c.routed_scaling_factor},
                                 c.moe_latent_size.has_value()};
        LatentMoeWeights grads = moe_weights(g, prefix);
        grads.correction_bias = Tensor();  // a buffer
        return latent_moe_backward(spec, moe_weights(w, prefix), dy, moe, grads);
      }
      case NemotronHLayer::Mlp: {
        const Tensor dact = ops::linear_backward(dy, ops::relu_squared_forward(hidden), w.at(prefix + "down_proj.weight"),
                                                 g.at(prefix + "down_proj.weight"));
        return ops::linear_backward(ops::relu_squared_backward(dact, hidden), input, w.at(prefix + "up_proj.weight"),
                                    g.at(prefix + "up_proj.weight"));
      }
      case NemotronHLayer::Attention: {
        const Tensor dattended = ops::linear_backward(dy, attended.view({tokens, -1}), w.at(prefix + "o_proj.weight"),
                                                      g.at(prefix + "o_proj.weight"));
        const ops::AttentionGrads d =
            ops::causal_attention_backward(dattended.view(attended.shape()), q, k, v, attended, layout.mask,
                                           1.0 / std::sqrt(double(c.head_dim)));
        Tensor dx = ops::linear_backward(d.dq.view({tokens, -1}), input, w.at(prefix + "q_proj.weight"),
                                         g.at(prefix + "q_proj.weight"));
        accumulate(dx, ops::linear_backward(d.dk.view({tokens, -1}), input, w.at(prefix + "k_proj.weight"),
                                            g.at(prefix + "k_proj.weight")));
        accumulate(dx, ops::linear_backward(d.dv.view({tokens, -1}), input, w.at(prefix + "v_proj.weight"),
                                            g.at(prefix + "v_proj.weight")));
        return dx;
      }
    }
    return {};
  }
};

void check_case(const std::string& name) {
  const NemotronHConfig c =
      read_nemotron_h_config(io::ConfigReader(nlohmann::json::parse(testing::read_file(folder() / "config.json"))));
  const Tensors w = load_weights(c);
  const Tensors g = zeros_like(w);
  const io::SafetensorsFile ref = io::SafetensorsFile::open(folder() / "parity.safetensors");
  const Tensor ids = ref.tensor(name + ".input_ids");
  const Tensor mask = ref.contains(name + ".attention_mask") ? ref.tensor(name + ".attention_mask") : Tensor();
  const Tensor positions = ref.contains(name + ".position_ids") ? ref.tensor(name + ".position_ids") : Tensor();
  const SequenceLayout layout = sequence_layout(ids, positions, mask);
  const Mamba2Rows rows = mamba2_rows(layout);
  const double eps = c.norm_eps;

  // Forward: h_{l+1} = h_l + mixer_l(norm_l(h_l)).
  std::vector<Tensor> residual;
  std::vector<Mixer> mixers;
  Tensor h = ops::embedding_forward(ids.view({-1}), w.at("model.embeddings.weight"));
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".";
    residual.push_back(h);
    mixers.push_back(Mixer{c, layout, rows, c.layers[l], layer + "mixer.", {}, {}, {}, {}, {}, {}, {}});
    h = add(h, mixers.back().forward(w, ops::rms_norm_forward(h, w.at(layer + "norm.weight"), eps)));
  }
  const Tensor final_normed = ops::rms_norm_forward(h, w.at("model.norm_f.weight"), eps);
  const Tensor logits = ops::linear_forward(final_normed, w.at("lm_head.weight"));
  const std::vector<int64_t> targets = ops::shift_labels(ref.tensor(name + ".labels"));
  const ops::CrossEntropy ce = ops::cross_entropy(logits, targets);

  const Tensor expected_logits = ref.tensor(name + ".logits");
  const int64_t vocab = c.vocab_size;
  for (int64_t t = 0; t < ids.numel(); ++t) {
    if (mask.defined() && !mask.data<int64_t>()[t]) continue;
    EXPECT_LE(testing::relative_error_f32(logits[t], expected_logits.view({-1, vocab})[t]), 1e-5)
        << name << " logits of token " << t;
  }
  const double loss = ce.loss_sum / double(ce.count), expected_loss = ref.tensor(name + ".loss").data<float>()[0];
  EXPECT_LE(std::fabs(loss - expected_loss) / expected_loss, 1e-5) << name << " loss";

  // Backward, in reverse.
  const Tensor dlogits = ops::cross_entropy_backward(logits, targets, 1.0 / double(ce.count));
  const Tensor dfinal = ops::linear_backward(dlogits, final_normed, w.at("lm_head.weight"), g.at("lm_head.weight"));
  Tensor dh = ops::rms_norm_backward(dfinal, h, w.at("model.norm_f.weight"), eps, g.at("model.norm_f.weight"));
  for (size_t l = c.layers.size(); l-- > 0;) {
    const std::string norm = "model.layers." + std::to_string(l) + ".norm.weight";
    const Tensor dnormed = mixers[l].backward(w, g, dh);
    accumulate(dh, ops::rms_norm_backward(dnormed, residual[l], w.at(norm), eps, g.at(norm)));
  }
  ops::embedding_backward(dh, ids.view({-1}), g.at("model.embeddings.weight"));

  int checked = 0;
  for (const auto& [param, grad] : g) {
    if (param.find("e_score_correction_bias") != std::string::npos) continue;
    ASSERT_TRUE(ref.contains(name + ".grad." + param)) << param;
    EXPECT_LE(testing::relative_error_f32(grad, ref.tensor(name + ".grad." + param)), 1e-5) << name << " d" << param;
    ++checked;
  }
  EXPECT_EQ(checked, 36) << "every parameter of nemotron_h_tiny";
}

TEST(NemotronHPiecesParity, PlainBatch) { check_case("plain"); }
TEST(NemotronHPiecesParity, PaddedBatch) { check_case("padded"); }
TEST(NemotronHPiecesParity, PackedDocuments) { check_case("packed"); }

}  // namespace
}  // namespace moetune::model
