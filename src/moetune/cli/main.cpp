// The `moetune` program.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "moetune/cli/inspect.h"
#include "moetune/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"moetune: fine-tune Hugging Face transformer checkpoints, Mixture-of-Experts first"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moetune 0.1.0");

  std::string model_dir;
  bool as_json = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Architecture, layer kinds, shapes, parameter counts and fine-tuning memory of an HF model folder");
  inspect->add_option("MODEL_DIR", model_dir, "Hugging Face model folder (config.json + *.safetensors)")->required();
  inspect->add_flag("--json", as_json, "Print the report as JSON");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*inspect) {
      nlohmann::json report = moetune::cli::inspect_model(model_dir);
      std::fputs(as_json ? (report.dump(2) + "\n").c_str() : moetune::cli::format_inspection(report).c_str(), stdout);
    }
  } catch (const moetune::Error& e) {
    std::fprintf(stderr, "moetune: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moetune: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
