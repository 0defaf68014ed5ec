// Helpers shared by the tests: scratch folders, fixture paths, hand-made safetensors bytes.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::testing {

// A fresh folder under the system temp dir, removed when the object goes.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

std::filesystem::path fixture(const std::string& name);
// The model fixtures transformers made (tests/reference/make_fixtures.py, make_gpt_oss_fixtures.py): every family and
// option set the engine loads, trains and saves back as it read them (gpt_oss_mxfp4_tiny aside: it saves in bf16),
// each of which the GPU engine trains too.
const std::vector<std::string>& model_fixtures();
// The fixtures with transformers' training-parity files (parity.safetensors: logits, losses and every gradient for a
// plain, a padded and a packed batch, then three AdamW steps): model_fixtures()' fp32 models, qwen3_tiny and
// qwen3_moe_tied_bf16 (bf16 checkpoints) replaced by their fp32 twins qwen3_f32 and qwen3_moe_tied_f32. The CPU
// and GPU parity tests, GPU eval and GPU generation all run this one list.
const std::vector<std::string>& parity_fixtures();
std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& bytes);
// A safetensors file's bytes from a header text and a data section, the length prefix computed here.
std::string safetensors_bytes(const std::string& header, const std::string& data);
struct RunResult {
  int status;          // exit code
  std::string output;  // stdout and stderr together
};
// Runs the moetune program with `arguments` as a user would, from a shell.
RunResult run_moetune(const std::string& arguments);
// Runs `command_line` in a shell (sh -c), its stderr with its stdout.
RunResult run_shell(const std::string& command_line);

// ‖actual − expected‖₂ / ‖expected‖₂ over two CPU f32 tensors of as many elements, in double; +inf when
// `actual` holds a NaN (the absolute error when `expected` is zero).
double relative_error_f32(const Tensor& actual, const Tensor& expected);

// Copies a fixture folder, for tests that break it.
void copy_folder(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace moetune::testing
