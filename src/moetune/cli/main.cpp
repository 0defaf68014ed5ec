// The `moetune` program.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <unistd.h>

#include "moetune/cli/chat.h"
#include "moetune/cli/eval.h"
#include "moetune/cli/finetune.h"
#include "moetune/cli/generate.h"
#include "moetune/cli/inspect.h"
#include "moetune/cli/launch.h"
#include "moetune/cli/sizes.h"
#include "moetune/core/error.h"
#include "moetune/io/hub_cache.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/lora_weights.h"
#include "moetune/parallel/world.h"
#include "moetune/train/engine.h"

namespace {

// Prints the failure with this rank's number; in a job of several ranks it then ends every rank, since the
// others would wait for this one in their next collective forever.
int end_job(int status, const char* kind, const char* message) {
  std::fprintf(stderr, "moetune: %s%s: %s\n", moetune::parallel::rank_prefix().c_str(), kind, message);
  std::fflush(stderr);
  if (!moetune::parallel::rank_prefix().empty()) moetune::parallel::mpi_abort(status);
  return status;
}

// The flags `generate` and `chat` share: sampling, the device and the speed report.
void add_generation_options(CLI::App* command, moetune::model::GenerateOptions& options, std::string& device,
                            bool& speed) {
  command->add_option("--device", device, "auto (the GPU when one is visible and runs the family), cpu or cuda")
      ->capture_default_str();
  command->add_flag("--speed", speed, "Print the prompt's time and the decode speed (tokens/s) to stderr");
  command->add_option("--max-new-tokens", options.max_new_tokens, "How many tokens at most")->capture_default_str();
  command->add_option("--temperature", options.temperature, "0 for greedy; else sample")->capture_default_str();
  command->add_option("--top-p", options.top_p, "Nucleus sampling mass (with --temperature > 0)")->capture_default_str();
  command->add_option("--seed", options.seed, "Sampling seed")->capture_default_str();
}

}  // namespace

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
  int64_t plan_tokens = 0;
  // 2^40 tokens is far past any micro-batch, and keeps the plan's byte counts from overflowing.
  int inspect_expert = 0, inspect_world = 0;
  inspect->add_option("--expert-parallel", inspect_expert, "Print the per-rank plan for this expert-parallel size");
  inspect->add_option("--world-size", inspect_world, "Ranks for the per-rank plan (default: the expert-parallel size)");
  inspect->add_option("--tokens", plan_tokens,
                      "Tokens per micro-batch (micro-batch × sequence): adds the GPU step's activation plan and peak")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  std::string inspect_recompute = "none";
  inspect->add_option("--recompute", inspect_recompute, "The activation plan with training.recompute: none, experts, attention, full")
      ->capture_default_str();
  bool inspect_update_in_backward = false;
  inspect->add_flag("--update-in-backward", inspect_update_in_backward,
                    "The plan with optimizer.update_in_backward: one decoder layer's gradients at a time");
  int64_t inspect_lm_head_chunk_rows = 0;
  inspect->add_option("--lm-head-chunk-rows", inspect_lm_head_chunk_rows,
                      "The plan with training.lm_head_chunk_rows: the LM head's chunk of logits (0: auto)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));

  moetune::model::LoraConfig inspect_lora;
  inspect->add_option("--lora-rank", inspect_lora.rank, "Add the plan of a LoRA fine-tune of this rank");
  inspect->add_option("--lora-alpha", inspect_lora.alpha, "LoRA alpha (scale alpha/rank)");
  inspect->add_option("--lora-target-modules", inspect_lora.target_modules, "PEFT target_modules (names, one regex, or all-linear)");
  inspect->add_option("--lora-target-parameters", inspect_lora.target_parameters, "PEFT target_parameters: mlp.experts.gate_up_proj ...");

  std::string output_dir, max_shard_size = "5GB";
  CLI::App* convert = app.add_subcommand(
      "convert", "Load an HF model folder through moetune and save it again (re-shard; checks the round trip)");
  convert->add_option("MODEL_DIR", model_dir, "Hugging Face model folder to read")->required();
  convert->add_option("OUTPUT_DIR", output_dir, "Folder to write (created; its old weight files are replaced)")->required();
  convert->add_option("--max-shard-size", max_shard_size, "Largest shard, as transformers spells it: 5GB, 500MB, 2GiB")
      ->capture_default_str();

  std::string adapter_dir;
  CLI::App* merge = app.add_subcommand(
      "merge", "Fold a LoRA adapter (PEFT's adapter_config.json + adapter_model.safetensors) into its base model and "
      "save the merged HF folder, as PEFT's merge_and_unload + save_pretrained do");
  merge->add_option("BASE_DIR", model_dir, "The adapter's base model (HF folder)")->required();
  merge->add_option("ADAPTER_DIR", adapter_dir, "The adapter folder (moetune finetune with lora:, or PEFT)")->required();
  merge->add_option("OUTPUT_DIR", output_dir, "Folder to write the merged model to")->required();
  merge->add_option("--max-shard-size", max_shard_size, "Largest shard: 5GB, 500MB, 2GiB")->capture_default_str();

  moetune::cli::EvalArgs eval_args;
  CLI::App* eval = app.add_subcommand(
      "eval", "Mean cross-entropy and perplexity of an HF model folder on data of any shape training reads (the tokens "
      "training scores)");
  eval->add_option("MODEL_DIR", model_dir, "Hugging Face model folder (config.json + *.safetensors)")->required();
  eval->add_option("--data", eval_args.data,
                   "JSONL files, folders or glob patterns, as data.train takes them (default: the recipe's data.validation)");
  eval->add_option("-c,--config", eval_args.recipe,
                   "A training recipe: its data section reads the lines as training does (data.columns, data.roles, "
                   "data.chat_template, ...)");
  eval->add_option("--set", eval_args.overrides, "Override a recipe key: --set data.roles.bot=assistant (repeatable)");
  eval->add_option("--format", eval_args.format, "Line shape, as data.format: auto, text, prompt_completion, messages, "
                   "sharegpt, alpaca, input_ids")->capture_default_str();
  eval->add_option("--max-length", eval_args.max_length, "Tokens kept of each line, as data.max_length (0: all)")
      ->capture_default_str();
  eval->add_flag("--json", as_json, "Print the report as JSON");
  eval->add_option("--device", eval_args.device, "auto (the GPU when one is visible), cpu or cuda")->capture_default_str();

  moetune::cli::FinetuneArgs finetune_args;
  std::string recipe_path;
  CLI::App* finetune = app.add_subcommand(
      "finetune", "Fine-tune a model from a recipe (or --set model=... --set data.train=...); with neither, the embedded "
      "default (a tiny MoE learns a task)");
  finetune->add_option("-c,--config", recipe_path, "Recipe (YAML); every key has a default");
  finetune->add_option("--set", finetune_args.overrides, "Override a recipe key: --set optimizer.lr=2e-5 (repeatable)");
  finetune->add_flag("--resume", finetune_args.resume, "Continue from the newest checkpoint in the output folder");
  int nproc_per_node = -1;
  finetune->add_option("--nproc-per-node", nproc_per_node,
                       "Start this many ranks on this node (through mpirun); parallel.expert splits the experts over them");
  finetune->add_flag("--print-recipe", finetune_args.print_recipe,
                     "Print the recipe as the run would use it (file, then --set, every default filled in) and exit");

  moetune::cli::GenerateArgs generate_args;
  std::string generate_model;
  CLI::App* generate = app.add_subcommand("generate", "Continue a prompt with an HF model folder");
  generate->add_option("MODEL_DIR", generate_model, "Hugging Face model folder")->required();
  generate->add_option("--prompt", generate_args.prompt, "The text to continue")->required();
  generate->add_flag("--chat", generate_args.chat, "Send the prompt as a user message through the chat template");
  add_generation_options(generate, generate_args.options, generate_args.device, generate_args.speed);

  moetune::cli::ChatArgs chat_args;
  CLI::App* chat = app.add_subcommand(
      "chat", "Talk with an HF model folder: each line on stdin is a user turn, the conversation is kept (\"/reset\" "
      "starts afresh) and rendered with the chat template each turn");
  chat->add_option("MODEL_DIR", model_dir, "Hugging Face model folder (with tokenizer.json and a chat template)")->required();
  chat->add_option("--system", chat_args.system, "A system message to open the conversation");
  add_generation_options(chat, chat_args.options, chat_args.device, chat_args.speed);

  CLI11_PARSE(app, argc, argv);
  try {
    // Every MODEL_DIR may also be a hub id of the local Hugging Face cache.
    if (!model_dir.empty()) model_dir = moetune::io::resolve_model_folder(model_dir).string();
    if (!generate_model.empty()) generate_model = moetune::io::resolve_model_folder(generate_model).string();
    if (*inspect) {
      nlohmann::json report = moetune::cli::inspect_model(
          model_dir, plan_tokens, moetune::model::parse_recompute(inspect_recompute, "--recompute"), inspect_update_in_backward,
          inspect_lm_head_chunk_rows);
      if (inspect_expert > 0 || inspect_world > 0)
        moetune::cli::add_expert_parallel_plan(report, model_dir, inspect_world > 0 ? inspect_world : inspect_expert,
                                               std::max(inspect_expert, 1), plan_tokens);
      if (inspect_lora.enabled()) moetune::cli::add_lora_plan(report, model_dir, inspect_lora);
      std::fputs(as_json ? (report.dump(2) + "\n").c_str() : moetune::cli::format_inspection(report).c_str(), stdout);
    } else if (*convert) {
      const size_t shard_bytes = moetune::cli::parse_size(max_shard_size, "--max-shard-size");
      moetune::model::ModelWeights weights = moetune::model::load_checkpoint(model_dir);
      moetune::model::save_checkpoint(weights, output_dir, {shard_bytes});
      std::printf("%s -> %s: %zu parameters saved\n", model_dir.c_str(), output_dir.c_str(), weights.parameters.size());
    } else if (*merge) {
      const size_t shard_bytes = moetune::cli::parse_size(max_shard_size, "--max-shard-size");
      moetune::model::ModelWeights weights = moetune::model::load_with_adapter(model_dir, adapter_dir);
      moetune::model::merge_lora(weights);
      moetune::model::save_checkpoint(weights, output_dir, {shard_bytes});
      std::printf("%s + %s -> %s (merged, saved in the base model's dtypes)\n", model_dir.c_str(), adapter_dir.c_str(),
                  output_dir.c_str());
    } else if (*eval) {
      eval_args.model = model_dir;
      nlohmann::json report = moetune::cli::evaluate_model(eval_args);
      std::fputs(as_json ? (report.dump(2) + "\n").c_str() : moetune::cli::format_evaluation(report).c_str(), stdout);
    } else if (*finetune) {
      if (nproc_per_node != -1)
        moetune::cli::launch_local_ranks(nproc_per_node, moetune::cli::arguments_without_nproc(argc, argv),
                                         moetune::train::uses_gpu_engine(moetune::train::load_recipe(recipe_path, finetune_args.overrides)));
      finetune_args.recipe = recipe_path;
      return moetune::cli::run_finetune(finetune_args);
    } else if (*chat) {
      chat_args.model = model_dir;
      moetune::cli::run_chat(chat_args, std::cin, std::cout, isatty(STDIN_FILENO) ? &std::cerr : nullptr);
    } else if (*generate) {
      generate_args.model = generate_model;
      std::printf("%s\n", moetune::cli::run_generate(generate_args).c_str());
    }
  } catch (const moetune::Error& e) {
    return end_job(1, "error", e.what());
  } catch (const std::filesystem::filesystem_error& e) {  // its message names the paths
    return end_job(1, "error", e.what());
  } catch (const std::bad_alloc&) {
    return end_job(1, "error", "out of memory (the model, data or settings ask for more than there is)");
  } catch (const std::exception& e) {
    return end_job(2, "internal error", e.what());
  }
  return 0;
}
