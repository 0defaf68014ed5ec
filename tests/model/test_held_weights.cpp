// LoadOptions::held_elsewhere / take (QLoRA's NF4 base on the GPU takes its weights so): the selected parameters
// are handed over in the checkpoint's precision with the values a plain load gives, and never placed.
#include <gtest/gtest.h>

#include <cstring>

#include "moetune/io/safetensors_folder.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/ops/cast.h"
#include "test_util.h"

namespace moetune::model {
namespace {

// Per-expert f32 and bf16 checkpoints, and a bf16 one with transformers v5's fused experts (their pages go to the
// taker as they are).
TEST(HeldWeights, TakenInTheCheckpointsPrecisionAndNotPlaced) {
  testing::ScratchDir dir;
  {
    ModelWeights fused = load_checkpoint(testing::fixture("qwen3_moe_tied_bf16"));
    for (size_t i = 0; i < fused.parameters.size(); ++i) fused.stored_fused[i] = !fused.layout.parameters[i].fused_hf_name.empty();
    save_checkpoint(fused, dir / "fused");
    ASSERT_TRUE(io::SafetensorsFolder::open(dir / "fused").contains("model.layers.1.mlp.experts.gate_up_proj"));
  }
  for (const std::filesystem::path& folder :
       {testing::fixture("qwen3_moe_tiny"), testing::fixture("qwen3_moe_tied_bf16"), dir / "fused"}) {
    SCOPED_TRACE(folder.string());
    const ModelWeights plain = load_checkpoint(folder, {DType::F32});
    std::vector<std::pair<size_t, Tensor>> taken;
    LoadOptions options{DType::BF16};
    options.held_elsewhere = &quantized_by_qlora;
    options.take = [&](size_t index, const Tensor& host) { taken.emplace_back(index, host.clone()); };
    const ModelWeights held = load_checkpoint(folder, options);
    ASSERT_FALSE(taken.empty());
    size_t expected = 0;
    for (size_t i = 0; i < held.parameters.size(); ++i) {
      const bool selected = quantized_by_qlora(held.layout.parameters[i]);
      expected += selected;
      EXPECT_EQ(held.parameters[i].defined(), !selected) << held.layout.parameters[i].name;
    }
    EXPECT_EQ(taken.size(), expected);
    for (const auto& [index, host] : taken) {
      SCOPED_TRACE(held.layout.parameters[index].name);
      EXPECT_EQ(host.dtype(), held.disk_dtypes[index] == DType::BF16 ? DType::BF16 : DType::F32);
      const Tensor values = ops::cast(host, DType::F32);
      ASSERT_EQ(values.shape(), plain.parameters[index].shape());
      EXPECT_EQ(std::memcmp(values.raw_data(), plain.parameters[index].raw_data(), values.nbytes()), 0);
    }
  }
}

}  // namespace
}  // namespace moetune::model
