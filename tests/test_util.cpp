#include "test_util.h"
#include "json_lines.h"

#include <unistd.h>

#include <array>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace moetune::testing {

double relative_error_f32(const Tensor& actual, const Tensor& expected) {
  if (actual.numel() != expected.numel()) return INFINITY;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.data<float>()[i], b = expected.data<float>()[i];
    if (std::isnan(a)) return INFINITY;
    diff += (a - b) * (a - b);
    norm += b * b;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() / ("moetune-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

fs::path fixture(const std::string& name) { return fs::path(MOETUNE_FIXTURES_DIR) / name; }

const std::vector<std::string>& model_fixtures() {
  static const std::vector<std::string> names = {"qwen3_moe_tiny",
                                                 "qwen3_moe_tied_bf16",
                                                 "qwen3_tiny",
                                                 "llama_tiny",
                                                 "mixtral_tiny",
                                                 "qwen2_moe_tiny",
                                                 "gpt_oss_tiny",
                                                 "deepseek_v3_tiny",
                                                 "deepseek_v3_qproj_tied",
                                                 "deepseek_v3_pad_nulls",
                                                 "nemotron_h_tiny",
                                                 "qwen3_sliding_yarn",
                                                 "mixtral_sliding_dynamic",
                                                 "qwen2_tiny",
                                                 "mistral_tiny",
                                                 "glm4_moe_tiny",
                                                 "glm4_moe_quarter_tied",
                                                 "glm4_moe_lite_tiny",
                                                 "phi3_tiny",
                                                 "phi4_mini_tiny",
                                                 "smollm3_tiny",
                                                 "olmoe_tiny",
                                                 "minimax_m2_tiny",
                                                 "deepseek_v2_tiny",
                                                 "deepseek_v2_grouped",
                                                 "dots1_tiny",
                                                 "olmo2_tiny",
                                                 "olmo3_tiny",
                                                 "exaone4_tiny",
                                                 "solar_open_tiny",
                                                 "flex_olmo_tiny",
                                                 "exaone_moe_tiny",
                                                 "gemma3_tiny",
                                                 "gemma_tiny",
                                                 "ernie4_5_moe_tiny",
                                                 "granitemoehybrid_tiny",
                                                 "granitemoeshared_tiny",
                                                 "qwen3_next_tiny"};
  return names;
}

const std::vector<std::string>& parity_fixtures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> fp32;
    for (const std::string& name : model_fixtures())
      fp32.push_back(name == "qwen3_tiny" ? "qwen3_f32" : name == "qwen3_moe_tied_bf16" ? "qwen3_moe_tied_f32" : name);
    return fp32;
  }();
  return names;
}

std::string read_file(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((length >> (8 * i)) & 0xff);
  return bytes + header + data;
}

RunResult run_moetune(const std::string& arguments) { return run_shell(std::string(MOETUNE_BINARY) + " " + arguments); }

RunResult run_shell(const std::string& command_line) {
  const std::string command = "{ " + command_line + "; } 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& file) {
  std::vector<nlohmann::json> records;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  return records;
}

}  // namespace moetune::testing
