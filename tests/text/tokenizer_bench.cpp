// Single-threaded encode speed, to compare with HF tokenizers (tests/reference/tokenizer_speed.py does the same work
// in Python): the whole text in one encode call, then line by line.
//   moetune_tokenizer_bench [TOKENIZER_DIR [TEXT_FILE]]
// Without arguments: the qwen_style fixture, and the test strings of cases.json joined by newlines and repeated to
// 5 MB. Not run by ctest.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moetune/core/error.h"
#include "moetune/text/tokenizer.h"

namespace {

constexpr size_t kDefaultBytes = size_t(5) << 20;

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) moetune::fail("{}: cannot open", path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

std::string default_text() {
  const auto cases = nlohmann::json::parse(read_file(MOETUNE_FIXTURES_DIR "/tokenizers/cases.json"));
  std::string block;
  for (const auto& text : cases["texts"]) block += text.get<std::string>() + "\n";
  std::string text;
  while (text.size() < kDefaultBytes) text += block;
  return text;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The process's CPU time in seconds (all threads): on a shared machine it moves much less than wall time.
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

struct Timing {
  double wall = 1e30, cpu = 1e30;  // seconds, each the best over the repeats
  size_t tokens = 0;
};

// Runs `work` (which returns the number of tokens it made) `repeats` times.
template <typename Work>
Timing best_of(int repeats, Work&& work) {
  Timing timing;
  for (int i = 0; i < repeats; ++i) {
    const auto wall_start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    timing.tokens = work();
    timing.cpu = std::min(timing.cpu, cpu_seconds() - cpu_start);
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_start;
    timing.wall = std::min(timing.wall, wall.count());
  }
  return timing;
}

void report(const char* what, double megabytes, const Timing& timing) {
  fmt::print("{:<42} {:8.2f} MB/s CPU time, {:8.2f} MB/s wall  ({} tokens)\n", what, megabytes / timing.cpu,
             megabytes / timing.wall, timing.tokens);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string folder = argc > 1 ? argv[1] : MOETUNE_FIXTURES_DIR "/tokenizers/qwen_style";
    const std::string text = argc > 2 ? read_file(argv[2]) : default_text();
    const double megabytes = double(text.size()) / 1e6;

    auto start = std::chrono::steady_clock::now();
    const auto tokenizer = moetune::text::Tokenizer::from_folder(folder);
    fmt::print("tokenizer {}: loaded in {:.3f} s\n", folder,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    fmt::print("text: {:.2f} MB\n", megabytes);

    report("whole text, first call (cold word cache):", megabytes,
           best_of(1, [&] { return tokenizer.encode(text).size(); }));
    report("whole text, best of 3:", megabytes, best_of(3, [&] { return tokenizer.encode(text).size(); }));
    const auto lines = lines_of(text);
    report(fmt::format("line by line ({} lines), best of 3:", lines.size()).c_str(), megabytes, best_of(3, [&] {
             size_t count = 0;
             for (std::string_view line : lines) count += tokenizer.encode(line).size();
             return count;
           }));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
