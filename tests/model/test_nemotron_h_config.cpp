// Nemotron-H's config.json reader against transformers 5.17 (tests/reference/make_nemotron_h_counts.py): the
// parameter count of Nemotron-3-Nano-30B-A3B's architecture and of a small latent-MoE config written with the
// legacy spellings, the layer pattern in each spelling, and refusals that name the key.
#include <gtest/gtest.h>

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"
#include "moetune/model/families/nemotron_h_config.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using nlohmann::json;
using L = NemotronHLayer;

json fixture_json(const std::string& name) {
  return json::parse(testing::read_file(testing::fixture("nemotron_h_configs") / name));
}

NemotronHConfig read(const json& config) { return read_nemotron_h_config(io::ConfigReader(config)); }

TEST(NemotronHConfig, ParameterCountsEqualTransformers) {
  const json counts = fixture_json("counts.json");
  for (const char* name : {"nano_30b_a3b", "latent"}) {
    const NemotronHConfig config = read(fixture_json(std::string(name) + ".json"));
    EXPECT_EQ(nemotron_h_parameter_count(config), counts[name]["num_parameters"].get<int64_t>()) << name;
    EXPECT_EQ(int64_t(config.layers.size()), int64_t(counts[name]["layer_types"].size())) << name;
    EXPECT_EQ(config.mamba.num_groups, counts[name]["n_groups"].get<int64_t>()) << name;
    EXPECT_EQ(config.mamba.conv_kernel, counts[name]["conv_kernel"].get<int64_t>()) << name;
    EXPECT_EQ(config.num_experts, counts[name]["n_routed_experts"].get<int64_t>()) << name;
  }
}

// The family's engine layout holds exactly these tensors (names and shapes, e_score_correction_bias a buffer),
// and counts what transformers counts: 31,577,937,344 for Nano's architecture.
TEST(NemotronHConfig, FamilyLayoutIsTheTensorInventory) {
  const json counts = fixture_json("counts.json");
  for (const char* name : {"nano_30b_a3b", "latent"}) {
    json config = fixture_json(std::string(name) + ".json");
    config["architectures"] = {"NemotronHForCausalLM"};
    config["model_type"] = "nemotron_h";
    const ParameterLayout layout = parameter_layout(describe_model(config, name));
    EXPECT_EQ(layout.total_parameters(), counts[name]["num_parameters"].get<int64_t>()) << name;
    std::vector<std::pair<std::string, Shape>> pieces, inventory;
    for (const ParameterSpec& p : layout.parameters)
      for (const HfTensor& piece : p.pieces) pieces.emplace_back(piece.name, piece.shape);
    for (const NemotronHTensor& t : nemotron_h_tensors(read(config))) inventory.emplace_back(t.name, t.shape);
    std::sort(pieces.begin(), pieces.end());
    std::sort(inventory.begin(), inventory.end());
    EXPECT_EQ(pieces, inventory) << name;
  }
}

// The names and shapes transformers' save_pretrained writes: what moetune must write back for transformers to load.
TEST(NemotronHConfig, TensorsAreWhatTransformersSaves) {
  const json saved = fixture_json("latent_saved.json");
  const std::vector<NemotronHTensor> tensors = nemotron_h_tensors(read(fixture_json("latent.json")));
  EXPECT_EQ(tensors.size(), saved.size());
  for (const NemotronHTensor& t : tensors) {
    ASSERT_TRUE(saved.contains(t.name)) << t.name;
    EXPECT_EQ(t.shape, saved[t.name].get<Shape>()) << t.name;
  }
}

TEST(NemotronHConfig, NanoShapesAsPublished) {
  const NemotronHConfig c = read(fixture_json("nano_30b_a3b.json"));
  EXPECT_EQ(c.mamba.projection(), 10304);  // z 4096 + xBC 6144 + dt 64
  EXPECT_EQ(c.mamba.conv_channels(), 6144);
  EXPECT_EQ(c.mamba.inner() / c.mamba.num_groups, 512);  // the gated norm's group
  EXPECT_DOUBLE_EQ(c.mamba.dt_min, 0.001);
  EXPECT_EQ(std::count(c.layers.begin(), c.layers.end(), L::Mamba2), 23);
  EXPECT_EQ(std::count(c.layers.begin(), c.layers.end(), L::Moe), 23);
  EXPECT_EQ(std::count(c.layers.begin(), c.layers.end(), L::Attention), 6);
}

TEST(NemotronHConfig, LayerPatternInEverySpelling) {
  const std::vector<L> expected{L::Mamba2, L::Moe, L::Attention, L::Mlp};
  EXPECT_EQ(read(json{{"layers_block_type", {"linear_attention", "moe", "full_attention", "mlp"}}}).layers, expected);
  EXPECT_EQ(read(json{{"layer_types", {"mamba", "moe", "attention", "mlp"}}}).layers, expected);
  EXPECT_EQ(read(json{{"hybrid_override_pattern", "ME*-"}}).layers, expected);
  EXPECT_EQ(read(json::object()).layers, expected);  // transformers' default pattern
  // layer_types wins over layers_block_type (helper-45 ran NemotronHConfig: applied last), aliases over their
  // fields: num_local_experts over n_routed_experts.
  EXPECT_EQ(read(json{{"layer_types", {"moe"}}, {"layers_block_type", {"mlp"}}}).layers,
            std::vector<NemotronHLayer>{NemotronHLayer::Moe});
  EXPECT_EQ(read(json{{"layers_block_type", {"moe"}}, {"n_routed_experts", 4}, {"num_local_experts", 6}}).num_experts, 6);
  // layers_block_type wins over the pattern string, and num_hidden_layers does not count.
  EXPECT_EQ(read(json{{"layers_block_type", {"mlp"}}, {"hybrid_override_pattern", "MM"}, {"num_hidden_layers", 5}}).layers,
            std::vector<L>{L::Mlp});
}

TEST(NemotronHConfig, MambaAliasesWinOverThePlainNames) {
  const NemotronHConfig c = read(json{{"n_groups", 8},        {"mamba_n_groups", 2}, {"conv_kernel", 4},
                                      {"mamba_d_conv", 3},    {"time_step_min", 0.5}, {"mamba_dt_min", 0.25},
                                      {"mamba_conv_bias", false}, {"mamba_chunk_size", 64}, {"num_local_experts", 16}});
  EXPECT_EQ(c.mamba.num_groups, 2);
  EXPECT_EQ(c.mamba.conv_kernel, 3);
  EXPECT_DOUBLE_EQ(c.mamba.dt_min, 0.25);
  EXPECT_FALSE(c.mamba.conv_bias);
  EXPECT_EQ(c.chunk_size, 64);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(read(json{{"num_attention_heads", 6}, {"num_key_value_heads", nullptr}}).num_kv_heads, 6);
}

void expect_refused(const json& config, const std::string& names) {
  try {
    read(config);
    ADD_FAILURE() << "accepted " << config.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

// Python's json writes time_step_limit's inf as a bare Infinity (and json.load, so transformers, reads it back):
// read as transformers 5's {"__float__": "Infinity"}, which the config reader takes; the words inside strings stay.
TEST(NemotronHConfig, PythonInfinityIsReadAsPythonReadsIt) {
  const json parsed = io::parse_json_text(
      R"({"hidden_size": 32, "time_step_limit": [0.0, Infinity], "low": -Infinity, "x": NaN, "note": "NaN Infinity \" NaN"})",
      "config.json");
  EXPECT_EQ(parsed["time_step_limit"][1], json({{"__float__", "Infinity"}}));
  EXPECT_EQ(parsed["low"], json({{"__float__", "-Infinity"}}));
  EXPECT_EQ(parsed["x"], json({{"__float__", "NaN"}}));
  EXPECT_EQ(parsed["note"], "NaN Infinity \" NaN");
  EXPECT_NO_THROW(read(json::parse(R"({"time_step_limit": [0.0, {"__float__": "Infinity"}]})")));
  EXPECT_NO_THROW(read(parsed));
}

TEST(NemotronHConfig, RefusalsNameTheKey) {
  expect_refused(json{{"attention_dropout", 0.1}}, "attention_dropout");
  expect_refused(json{{"layers_block_type", {"mamba", "sliding_attention"}}}, "sliding_attention");
  expect_refused(json{{"hybrid_override_pattern", "MX"}}, "hybrid_override_pattern");
  expect_refused(json{{"mlp_hidden_act", "silu"}}, "mlp_hidden_act");
  expect_refused(json{{"mamba_hidden_act", "gelu"}}, "mamba_hidden_act");
  expect_refused(json{{"mamba_num_heads", 6}, {"n_groups", 4}}, "n_groups");
  expect_refused(json{{"n_routed_experts", 6}, {"n_group", 4}}, "n_group");
}

}  // namespace
}  // namespace moetune::model
