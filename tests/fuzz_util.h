// Seeded mutation fuzzing, shared by the fuzz tests: every mutated input must either parse or fail with
// moetune::Error, never crash (the sanitizer build also proves no out-of-bounds access). MOETUNE_FUZZ_ITERATIONS
// scales the counts for a longer run; MOETUNE_FUZZ_SEED changes the seed, which each test prints.
#pragma once

#include <cstdlib>
#include <random>
#include <string>

namespace moetune::testing {

// `normal` unless MOETUNE_FUZZ_ITERATIONS asks for more.
inline int fuzz_iterations(int normal) {
  const char* text = std::getenv("MOETUNE_FUZZ_ITERATIONS");
  return text ? std::atoi(text) : normal;
}

inline uint32_t fuzz_seed() {
  const char* text = std::getenv("MOETUNE_FUZZ_SEED");
  return text ? uint32_t(std::strtoul(text, nullptr, 10)) : 20261130u;
}

// Mutations a fuzzer finds useful on text formats: flip, set interesting bytes, splice in tokens, truncate,
// duplicate a run; and the two that found issue 16's crashes and hangs: nesting (thousands of brackets or
// parentheses) and size (a run repeated thousands of times).
inline std::string mutate(std::string input, std::mt19937& rng) {
  static const std::string tokens[] = {"\"", "{", "}", "[", "]", ",", ":", "-1", "0", "1e309", "18446744073709551615",
                                       "null", "\"F32\"", "\"X99\"", "\"shape\"", "\"data_offsets\"", "\\u0000", "true",
                                       "{{", "}}", "{%", "%}", "*", "&a", "|"};
  const int count = 1 + int(rng() % 4);
  for (int m = 0; m < count && !input.empty(); ++m) {
    size_t at = rng() % input.size();
    switch (rng() % 8) {
      case 0: input[at] = char(input[at] ^ (1 << (rng() % 8))); break;
      case 1: input[at] = char("\x00\xff\x7f\x80 0{\""[rng() % 8]); break;
      case 2: input.insert(at, tokens[rng() % std::size(tokens)]); break;
      case 3: input.resize(at); break;
      case 4: input.erase(at, 1 + rng() % 8); break;
      case 5: input.insert(at, input.substr(at, 1 + rng() % 16)); break;
      case 6: input.insert(at, std::string(1 + rng() % 5000, "[{("[rng() % 3])); break;
      case 7: {
        const std::string run = input.substr(at, 1 + rng() % 16);
        std::string repeated;
        for (size_t times = 1 + rng() % 2000; times > 0; --times) repeated += run;
        input.insert(at, repeated);
        break;
      }
    }
  }
  return input;
}

}  // namespace moetune::testing
