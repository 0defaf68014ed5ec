// gpt-oss's MXFP4 experts: dequantized on load bit for bit as transformers' dequantizing path does
// (tests/fixtures/gpt_oss_mxfp4_tiny, quantized by tests/reference/make_gpt_oss_fixtures.py, with transformers'
// dequantized tensors beside it), and saved back in the bf16 layout save_pretrained writes for the model.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "moetune/core/half.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/mxfp4.h"
#include "test_util.h"

namespace moetune::model {
namespace {

const char* kFixture = "gpt_oss_mxfp4_tiny";
const char* kExperts[] = {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"};

float value_of(const Tensor& bf16, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(bf16.raw_data())[i]); }

TEST(Mxfp4, CodesAndScalesByTheFormatsDefinition) {
  // One row of one block: codes 0..15 then 15..0, low nibble first; scale 2^(128 - 127) = 2.
  std::vector<uint8_t> codes(16);
  for (int i = 0; i < 8; ++i) codes[size_t(i)] = uint8_t((2 * i) | ((2 * i + 1) << 4));
  for (int i = 8; i < 16; ++i) codes[size_t(i)] = uint8_t((31 - 2 * i) | ((30 - 2 * i) << 4));
  const Tensor blocks = Tensor::from_vector(codes, {1, 1, 16});
  const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  Tensor out = dequantize_mxfp4(blocks, Tensor::from_vector<uint8_t>({128}, {1, 1}));
  ASSERT_EQ(out.shape(), Shape({1, 32}));
  ASSERT_EQ(out.dtype(), DType::BF16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(value_of(out, i), 2 * e2m1[i]) << i;
    EXPECT_EQ(value_of(out, 16 + i), 2 * e2m1[15 - i]) << i;
  }
  EXPECT_TRUE(std::signbit(value_of(out, 8)));  // code 8 is -0
  // Scale 0 is 2^-127, a subnormal that bf16 keeps exactly; scale 255 overflows to infinity (0 · inf: NaN).
  out = dequantize_mxfp4(blocks, Tensor::from_vector<uint8_t>({0}, {1, 1}));
  EXPECT_EQ(value_of(out, 2), std::ldexp(1.0f, -127));
  EXPECT_EQ(value_of(out, 7), std::ldexp(6.0f, -127));
  out = dequantize_mxfp4(blocks, Tensor::from_vector<uint8_t>({255}, {1, 1}));
  EXPECT_TRUE(std::isinf(value_of(out, 2)));
  EXPECT_TRUE(std::isnan(value_of(out, 0)));
}

TEST(Mxfp4, LoadDequantizesBitExactlyAsTransformers) {
  const io::SafetensorsFile expected = io::SafetensorsFile::open(testing::fixture(kFixture) / "dequantized.safetensors");
  const io::SafetensorsFolder files = io::SafetensorsFolder::open(testing::fixture(kFixture));
  for (const char* name : kExperts) {
    ASSERT_TRUE(holds_mxfp4(files, name)) << name;
    EXPECT_TRUE(read_mxfp4(files, name).same_bytes(expected.tensor(name))) << name;
  }
  // Through the engine's layout (transposed, gate/up de-interleaved) and back, in fp32 as the CPU trains.
  const ModelWeights weights = load_checkpoint(testing::fixture(kFixture), LoadOptions{DType::F32});
  int compared = 0;
  for (const auto& [name, tensor] : to_hf_tensors(weights)) {
    if (name != kExperts[0] && name != kExperts[1]) continue;
    EXPECT_TRUE(tensor.same_bytes(expected.tensor(name))) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 2);
}

TEST(Mxfp4, SavesTheBf16LayoutTransformersWrites) {
  const ModelWeights weights = load_checkpoint(testing::fixture(kFixture));
  testing::ScratchDir out;
  save_checkpoint(weights, out.path());
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(testing::fixture(kFixture) / "saved_layout.json"));
  const io::SafetensorsFolder saved = io::SafetensorsFolder::open(out.path());
  std::vector<std::string> names;
  for (const auto& [name, dtype_shape] : expected["tensors"].items()) {
    names.push_back(name);
    ASSERT_TRUE(saved.contains(name)) << name;
    EXPECT_EQ(dtype_torch_name(saved.entry(name).dtype), dtype_shape[0].get<std::string>()) << name;
    EXPECT_EQ(saved.entry(name).shape, dtype_shape[1].get<Shape>()) << name;
  }
  EXPECT_EQ(saved.names(), names);
  // The saved folder holds the dequantized weights, so its config no longer says MXFP4 (as transformers' does not).
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(out / "config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));
  EXPECT_FALSE(expected["config_has_quantization_config"].get<bool>());
  // And it loads back to the same weights, now as plain bf16 tensors.
  const ModelWeights reloaded = load_checkpoint(out.path());
  for (size_t i = 0; i < weights.parameters.size(); ++i)
    EXPECT_TRUE(reloaded.parameters[i].same_bytes(weights.parameters[i])) << weights.layout.parameters[i].name;
}

TEST(Mxfp4, MismatchedBlocksAndScalesAreNamed) {
  testing::ScratchDir dir;
  const io::SafetensorsFolder files = io::SafetensorsFolder::open(testing::fixture(kFixture));
  io::NamedTensors tensors;
  for (const std::string& name : files.names()) {
    Tensor t = files.tensor(name);
    if (name == "model.layers.0.mlp.experts.down_proj_scales") t = t.narrow(0, 2).clone();  // 2 experts, not 4
    tensors.emplace_back(name, t);
  }
  io::save_safetensors_folder(dir.path(), tensors);
  std::filesystem::copy_file(testing::fixture(kFixture) / "config.json", dir / "config.json");
  try {
    load_checkpoint(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj_scales"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune::model
