// Seeded mutation fuzzing (fuzz_util.h) of the safetensors and config.json parsers.
#include <gtest/gtest.h>

#include <random>

#include "moetune/io/json_file.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/model_description.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace moetune::io {
namespace {

using testing::ScratchDir;

int iterations() { return testing::fuzz_iterations(1500); }
uint32_t seed() { return testing::fuzz_seed(); }
using testing::mutate;

TEST(Fuzz, SafetensorsParserNeverCrashes) {
  ScratchDir dir;
  // Seeds: a fixture shard and a file with every dtype the engine handles.
  std::vector<std::string> seeds = {testing::read_file(testing::fixture("qwen3_tiny") / "model.safetensors").substr(0, 4096)};
  save_safetensors(dir / "seed.safetensors", {{"a", Tensor::zeros({2, 2}, DType::BF16)}, {"b", Tensor::zeros({3}, DType::I64)},
                                              {"c", Tensor::zeros({0}, DType::F32)}});
  seeds.push_back(testing::read_file(dir / "seed.safetensors"));
  std::mt19937 rng(seed());
  int parsed = 0;
  for (int i = 0; i < iterations(); ++i) {
    std::string input = mutate(seeds[size_t(i) % seeds.size()], rng);
    testing::write_file(dir / "fuzz.safetensors", input);
    try {
      SafetensorsFile file = SafetensorsFile::open(dir / "fuzz.safetensors");
      for (const auto& entry : file.entries()) {
        Tensor t = file.tensor(entry.name);
        volatile unsigned char sink = 0;
        for (size_t b = 0; b < t.nbytes(); ++b) sink = sink ^ static_cast<unsigned char*>(t.raw_data())[b];
      }
      ++parsed;
    } catch (const Error&) {
    }
  }
  std::printf("safetensors fuzz: seed %u, %d inputs, %d parsed\n", seed(), iterations(), parsed);
}

TEST(Fuzz, ConfigParserNeverCrashes) {
  std::vector<std::string> seeds;
  for (const char* name : {"qwen3_moe_tiny", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny", "gpt_oss_tiny",
                           "gpt_oss_mxfp4_tiny", "nemotron_h_tiny"})
    seeds.push_back(testing::read_file(testing::fixture(name) / "config.json"));
  std::mt19937 rng(seed() + 1);
  int parsed = 0;
  for (int i = 0; i < iterations(); ++i) {
    std::string input = mutate(seeds[size_t(i) % seeds.size()], rng);
    try {
      // As config.json will be read: through the shared reader, which refuses nesting deeper than 1000.
      model::ParameterLayout layout = model::parameter_layout(model::describe_model(parse_json_text(input, "fuzz.json"), "fuzz.json"));
      (void)layout.total_parameters();
      ++parsed;
    } catch (const Error&) {
    }
  }
  std::printf("config fuzz: seed %u, %d inputs, %d parsed\n", seed(), iterations(), parsed);
}

}  // namespace
}  // namespace moetune::io
