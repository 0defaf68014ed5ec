// Every malformed safetensors file or model folder is an Error that names the file and the tensor or key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/model/checkpoint.h"
#include "test_util.h"

namespace moetune::io {
namespace {

using testing::ScratchDir;

// Expects `body` to throw an Error whose message contains every one of `parts`.
template <typename Body>
void expect_error(Body body, std::initializer_list<std::string> parts) {
  try {
    body();
    FAIL() << "no error";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

class BadSafetensors : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& header, const std::string& data = std::string(8, '\0')) {
    auto path = dir_ / "bad.safetensors";
    testing::write_file(path, testing::safetensors_bytes(header, data));
    return path;
  }
  void expect_open_error(const std::filesystem::path& path, std::initializer_list<std::string> parts) {
    expect_error([&] { SafetensorsFile::open(path); }, parts);
  }
  ScratchDir dir_;
};

TEST_F(BadSafetensors, TruncatedFile) {
  testing::write_file(dir_ / "short.safetensors", "abc");
  expect_open_error(dir_ / "short.safetensors", {"short.safetensors", "truncated"});
}

TEST_F(BadSafetensors, MissingFile) { expect_open_error(dir_ / "none.safetensors", {"none.safetensors", "cannot open"}); }

TEST_F(BadSafetensors, HeaderLengthPastEndOfFile) {
  std::string bytes = testing::safetensors_bytes("{}", "");
  bytes[0] = char(200);
  testing::write_file(dir_ / "bad.safetensors", bytes);
  expect_open_error(dir_ / "bad.safetensors", {"bad.safetensors", "header length 200 runs past the end"});
}

TEST_F(BadSafetensors, HeaderNotJson) { expect_open_error(write("{not json"), {"bad.safetensors", "not JSON"}); }

TEST_F(BadSafetensors, HeaderNotAnObject) { expect_open_error(write("[1,2]   "), {"bad.safetensors", "not a JSON object"}); }

TEST_F(BadSafetensors, UnknownDtype) {
  expect_open_error(write(R"({"w":{"dtype":"X99","shape":[2],"data_offsets":[0,8]}})"),
                    {"bad.safetensors", "'w'", "unknown dtype 'X99'"});
}

TEST_F(BadSafetensors, ShapeTimesDtypeDisagreesWithOffsets) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
                    {"bad.safetensors", "'w'", "12 bytes", "span 8"});
}

TEST_F(BadSafetensors, OffsetsOverlap) {
  expect_open_error(write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
                    {"bad.safetensors", "overlap"});
}

TEST_F(BadSafetensors, OffsetsOutOfBounds) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
                    {"bad.safetensors", "'w'", "past the end of the data"});
}

TEST_F(BadSafetensors, OffsetsReversed) {
  expect_open_error(write(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})"), {"bad.safetensors", "'w'", "end before"});
}

TEST_F(BadSafetensors, GapInData) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"), {"bad.safetensors", "'w'", "gap"});
}

TEST_F(BadSafetensors, TrailingBytes) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"), {"bad.safetensors", "not described"});
}

TEST_F(BadSafetensors, DuplicateTensorNames) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
                    {"bad.safetensors", "'w'", "more than once"});
}

TEST_F(BadSafetensors, HugeShapeDoesNotOverflow) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})"),
                    {"bad.safetensors", "'w'"});
}

TEST_F(BadSafetensors, NegativeShape) {
  expect_open_error(write(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), {"bad.safetensors", "'w'"});
}

// Model folders: index, shards, and the tensors the architecture needs.
class BadFolder : public ::testing::Test {
 protected:
  void SetUp() override { testing::copy_folder(testing::fixture("qwen3_moe_tiny"), dir_.path()); }
  nlohmann::json index() { return nlohmann::json::parse(testing::read_file(dir_ / kIndexFileName)); }
  void set_index(const nlohmann::json& value) { testing::write_file(dir_ / kIndexFileName, value.dump()); }
  // Rewrites the shard holding `name` with `edit` applied to its tensors.
  void edit_shard_of(const std::string& name, const std::function<void(NamedTensors&)>& edit) {
    auto path = dir_ / index()["weight_map"][name].get<std::string>();
    NamedTensors tensors;
    {
      SafetensorsFile file = SafetensorsFile::open(path);
      for (const auto& entry : file.entries()) tensors.emplace_back(entry.name, file.tensor(entry.name).clone());
    }
    edit(tensors);
    save_safetensors(path, tensors);
  }
  ScratchDir dir_;
};

TEST_F(BadFolder, MissingShard) {
  std::filesystem::remove(dir_ / "model-00002-of-00004.safetensors");
  expect_error([&] { SafetensorsFolder::open(dir_.path()); },
               {kIndexFileName, "shard 'model-00002-of-00004.safetensors'", "missing"});
}

TEST_F(BadFolder, NoWeightsAtAll) {
  for (const auto& item : std::filesystem::directory_iterator(dir_.path()))
    if (item.path().filename().string().starts_with("model")) std::filesystem::remove(item.path());
  expect_error([&] { SafetensorsFolder::open(dir_.path()); }, {"no weights"});
}

TEST_F(BadFolder, IndexNotJson) {
  testing::write_file(dir_ / kIndexFileName, "{oops");
  expect_error([&] { SafetensorsFolder::open(dir_.path()); }, {kIndexFileName, "not JSON"});
}

TEST_F(BadFolder, IndexPointsOutsideTheFolder) {
  auto value = index();
  value["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors";
  set_index(value);
  expect_error([&] { SafetensorsFolder::open(dir_.path()); }, {kIndexFileName, "lm_head.weight", "not a file in the folder"});
}

TEST_F(BadFolder, TensorMissingFromTheArchitecture) {
  const std::string name = "model.layers.2.mlp.experts.3.up_proj.weight";
  edit_shard_of(name, [&](NamedTensors& tensors) {
    std::erase_if(tensors, [&](const auto& t) { return t.first == name; });
  });
  auto value = index();
  value["weight_map"].erase(name);
  set_index(value);
  expect_error([&] { model::load_checkpoint(dir_.path()); }, {dir_.path().string(), "missing", name});
}

TEST_F(BadFolder, UnexpectedExtraTensor) {
  edit_shard_of("lm_head.weight", [](NamedTensors& tensors) {
    tensors.emplace_back("model.layers.0.mlp.shared_expert.weight", Tensor::zeros({2}, DType::F32));
  });
  auto value = index();
  value["weight_map"]["model.layers.0.mlp.shared_expert.weight"] = value["weight_map"]["lm_head.weight"];
  set_index(value);
  expect_error([&] { model::load_checkpoint(dir_.path()); }, {".safetensors", "unexpected tensor 'model.layers.0.mlp.shared_expert.weight'"});
}

TEST_F(BadFolder, TensorNotInIndex) {
  edit_shard_of("lm_head.weight", [](NamedTensors& tensors) { tensors.emplace_back("stray", Tensor::zeros({2}, DType::F32)); });
  expect_error([&] { SafetensorsFolder::open(dir_.path()); }, {"'stray'", "is not in"});
}

TEST_F(BadFolder, ShapeDisagreesWithConfig) {
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  edit_shard_of(name, [&](NamedTensors& tensors) {
    for (auto& [n, t] : tensors)
      if (n == name) t = Tensor::zeros({8, 32}, t.dtype());
  });
  expect_error([&] { model::load_checkpoint(dir_.path()); }, {".safetensors", name, "[8, 32]", "config.json implies [16, 32]"});
}

TEST_F(BadFolder, IntegerWeightIsNamed) {
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  edit_shard_of(name, [&](NamedTensors& tensors) {
    for (auto& [n, t] : tensors)
      if (n == name) t = Tensor::zeros(t.shape(), DType::I32);
  });
  expect_error([&] { model::load_checkpoint(dir_.path()); }, {".safetensors", name, "floating point"});
}

TEST_F(BadFolder, MissingConfig) {
  std::filesystem::remove(dir_ / "config.json");
  expect_error([&] { model::load_checkpoint(dir_.path()); }, {"config.json", "cannot open"});
}

}  // namespace
}  // namespace moetune::io
