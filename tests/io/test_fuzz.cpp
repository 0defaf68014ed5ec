// Seeded mutation fuzzing of the safetensors and config.json parsers: every mutated input either parses or
// fails with moetune::Error, never crashes. Run under ASan+UBSan (the sanitizer build) it also proves no
// out-of-bounds read. MOETUNE_FUZZ_ITERATIONS raises the count for a longer run; the seed is printed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "moetune/model/checkpoint.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::io {
namespace {

using testing::ScratchDir;

int iterations() {
  const char* text = std::getenv("MOETUNE_FUZZ_ITERATIONS");
  return text ? std::atoi(text) : 1500;
}

uint32_t seed() {
  const char* text = std::getenv("MOETUNE_FUZZ_SEED");
  return text ? uint32_t(std::strtoul(text, nullptr, 10)) : 20261130u;
}

// Mutations a fuzzer finds useful on text-headed binary formats: flip, set interesting bytes, splice in
// tokens, truncate, duplicate a run.
std::string mutate(std::string input, std::mt19937& rng) {
  static const std::string tokens[] = {"\"", "{", "}", "[", "]", ",", ":", "-1", "0", "1e309", "18446744073709551615",
                                       "null", "\"F32\"", "\"X99\"", "\"shape\"", "\"data_offsets\"", "\\u0000", "true"};
  const int count = 1 + int(rng() % 4);
  for (int m = 0; m < count && !input.empty(); ++m) {
    size_t at = rng() % input.size();
    switch (rng() % 6) {
      case 0: input[at] = char(input[at] ^ (1 << (rng() % 8))); break;
      case 1: input[at] = char("\x00\xff\x7f\x80 0{\""[rng() % 8]); break;
      case 2: input.insert(at, tokens[rng() % std::size(tokens)]); break;
      case 3: input.resize(at); break;
      case 4: input.erase(at, 1 + rng() % 8); break;
      case 5: input.insert(at, input.substr(at, 1 + rng() % 16)); break;
    }
  }
  return input;
}

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
  for (const char* name : {"qwen3_moe_tiny", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny"})
    seeds.push_back(testing::read_file(testing::fixture(name) / "config.json"));
  std::mt19937 rng(seed() + 1);
  int parsed = 0;
  for (int i = 0; i < iterations(); ++i) {
    std::string input = mutate(seeds[size_t(i) % seeds.size()], rng);
    try {
      nlohmann::json json = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
      if (json.is_discarded()) continue;
      model::ParameterLayout layout = model::parameter_layout(model::describe_model(json, "fuzz.json"));
      (void)layout.total_parameters();
      ++parsed;
    } catch (const Error&) {
    }
  }
  std::printf("config fuzz: seed %u, %d inputs, %d parsed\n", seed(), iterations(), parsed);
}

}  // namespace
}  // namespace moetune::io
