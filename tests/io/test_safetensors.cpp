#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/io/safetensors_folder.h"
#include "test_util.h"

namespace moetune::io {
namespace {

using testing::ScratchDir;

NamedTensors sample_tensors() {
  Tensor bf = Tensor::empty({2, 3}, DType::BF16);
  for (int i = 0; i < 6; ++i) bf.data_u16()[i] = uint16_t(0x3f80 + i);
  return {{"b.weight", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})},
          {"a.bf16", bf},
          {"c.ids", Tensor::from_vector<int64_t>({7, 8, 9}, {3})},
          {"d.empty", Tensor::zeros({0, 4}, DType::F32)},
          {"e.scalar", Tensor::from_vector<int32_t>({42}, {})},
          {"f.mask", Tensor::from_vector<uint8_t>({1, 0, 1}, {3})}};
}

TEST(Safetensors, WriteThenReadGivesTheSameTensors) {
  ScratchDir dir;
  NamedTensors tensors = sample_tensors();
  save_safetensors(dir / "x.safetensors", tensors);
  SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.entries().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    Tensor read = file.tensor(name);
    EXPECT_TRUE(read.same_bytes(tensor)) << name;
  }
}

TEST(Safetensors, HeaderIsPaddedAndTensorsAligned) {
  ScratchDir dir;
  save_safetensors(dir / "x.safetensors", sample_tensors());
  std::string bytes = testing::read_file(dir / "x.safetensors");
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(header_length % 8, 0u);
  std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.find_last_not_of(' ') + 1 <= header.size(), true);
  SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  for (const auto& entry : file.entries())
    EXPECT_EQ((8 + header_length + entry.begin) % dtype_size(entry.dtype), 0u) << entry.name;
}

TEST(Safetensors, ReadsAreZeroCopy) {
  ScratchDir dir;
  save_safetensors(dir / "x.safetensors", sample_tensors());
  SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  Tensor a = file.tensor("b.weight"), b = file.tensor("b.weight");
  EXPECT_EQ(a.raw_data(), b.raw_data());
}

TEST(Safetensors, MisalignedTensorsAreCopiedNotMisread) {
  // A hand-made file whose f32 tensor starts at an odd offset: still read correctly.
  ScratchDir dir;
  float value = 3.5f;
  std::string data(1, 'x');
  data.append(reinterpret_cast<const char*>(&value), 4);
  std::string header = R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8 + 1, ' ');  // deliberately not a multiple of 8
  testing::write_file(dir / "odd.safetensors", testing::safetensors_bytes(header, data));
  EXPECT_EQ(SafetensorsFile::open(dir / "odd.safetensors").tensor("f").data<float>()[0], 3.5f);
}

TEST(SafetensorsFolder, ShardsAndIndexBothWays) {
  ScratchDir dir;
  NamedTensors tensors;
  for (int i = 0; i < 10; ++i) tensors.emplace_back(fmt::format("t{}", i), Tensor::zeros({16}, DType::F32));
  save_safetensors_folder(dir.path(), tensors, SaveOptions{150});  // 64 bytes each: two per shard
  EXPECT_TRUE(std::filesystem::exists(dir / "model-00005-of-00005.safetensors"));
  auto index = nlohmann::json::parse(testing::read_file(dir / kIndexFileName));
  EXPECT_EQ(index["metadata"]["total_size"], 640);
  EXPECT_EQ(index["weight_map"]["t9"], "model-00005-of-00005.safetensors");
  SafetensorsFolder folder = SafetensorsFolder::open(dir.path());
  EXPECT_EQ(folder.shard_count(), 5u);
  EXPECT_EQ(folder.names().size(), 10u);

  // Saving again unsharded removes the stale shards and index.
  save_safetensors_folder(dir.path(), tensors);
  EXPECT_FALSE(std::filesystem::exists(dir / kIndexFileName));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00005.safetensors"));
  EXPECT_EQ(SafetensorsFolder::open(dir.path()).shard_count(), 1u);
}

TEST(SafetensorsFolder, OversizedTensorGetsAShardAlone) {
  ScratchDir dir;
  save_safetensors_folder(dir.path(), {{"small", Tensor::zeros({2}, DType::F32)}, {"big", Tensor::zeros({100}, DType::F32)},
                                       {"small2", Tensor::zeros({2}, DType::F32)}},
                          SaveOptions{64});
  EXPECT_EQ(SafetensorsFolder::open(dir.path()).shard_count(), 3u);
}

}  // namespace
}  // namespace moetune::io
