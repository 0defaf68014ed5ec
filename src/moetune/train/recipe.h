// A fine-tuning recipe: every key has a default (kDefaultRecipe in recipe.cpp, the one place they are written
// down), a YAML file overrides some, `--set a.b=value` overrides any. An unknown key, or a value of the wrong
// type, is an Error that names the key path and the file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "moetune/model/lora_config.h"

namespace moetune::train {

struct Recipe {
  std::string model;  // HF model folder

  struct Data {
    std::vector<std::string> train;       // JSONL files
    std::vector<std::string> validation;  // JSONL files; empty: split from train by validation_fraction
    double validation_fraction = 0;
    std::string format = "auto";          // auto, text, prompt_completion, messages, sharegpt, alpaca, input_ids
    bool loss_on_prompt = false;          // score prompts and non-assistant turns too
    int64_t max_length = 512;             // tokens per row; longer examples are truncated
    bool packing = true;                  // several examples per row, attention kept within each
    bool shuffle = true;
    std::string bad_lines = "error";      // error or skip
    std::string chat_template;            // a file or the template's text, used instead of the model's
    nlohmann::json chat_template_kwargs = nlohmann::json::object();  // more template variables: enable_thinking, ...
    // Other spellings of the known line shapes: {shape key: the lines' key}, e.g. {"messages": "chat", "prompt":
    // "question", "completion": "answer", "role": "speaker", "content": "text"} (data/line_mapping.h).
    nlohmann::json columns = nlohmann::json::object();
    nlohmann::json roles = nlohmann::json::object();  // {the lines' role: the template's}, e.g. {"bot": "assistant"}
    // Mixing weights {data.train entry: weight}: each epoch as many lines as the data, each entry's share in
    // proportion to its weight (data/mixing.h); empty: every line once per epoch.
    nlohmann::json train_weights = nlohmann::json::object();
  } data;

  struct Training {
    int64_t micro_batch_size = 4;         // rows per forward/backward (with micro_batch_auto: set by the trainer)
    int64_t gradient_accumulation_steps = 1;
    int64_t max_steps = 0;                // optimizer steps; 0: run `epochs` epochs
    double epochs = 1;
    int64_t seed = 1234;
    std::string device = "auto";          // auto, cpu, cuda
    // Steps in a row whose loss or gradient norm is NaN/Inf that are skipped (no update) before the run
    // stops with an error; 0 stops at the first. Above 0 needs the CPU engine.
    int64_t max_nonfinite_steps = 0;
    // The MoE load-balancing (aux) loss, weighted by config.json's router_aux_loss_coef: "config" adds it when
    // config.json's output_router_logits is true (Qwen3-30B-A3B ships false: no aux loss, so nothing keeps the
    // experts' load even), "on" or "off" whatever config.json says.
    std::string aux_loss = "config";
    // The aux loss's weight: "config" (config.json's router_aux_loss_coef) or a number >= 0 used instead.
    std::optional<double> aux_loss_coef;
    // Engine-name patterns ('*' matches anything, e.g. "layers.*.moe.router", "embed_tokens") of parameters to
    // freeze: no gradient, no optimizer state. The CPU engine on one rank only, so far.
    std::vector<std::string> freeze;
    // DeepSeek-V3's auxiliary-loss-free balancing: after each optimizer step every router correction bias moves
    // by this much toward balance (model/router_bias_balance.h). 0 (the default, as transformers trains) leaves
    // the biases as loaded. CPU engine, one rank, and only models whose routers have a correction bias.
    double router_bias_update_rate = 0.0;
    // The GPU engine times each phase of the step with CUDA events (core/phase_profile.h) and writes the table
    // to output.dir/profile.json and the log at the end; the first step (warm-up) is left out.
    bool profile = false;
    // Activation recomputation on the GPU engine (model/recompute.h): none, experts, attention, full.
    std::string recompute = "none";
    // With recomputation on, the last this many layers keep their stash anyway: the memory recomputing saved,
    // spent back on speed where the GPU has room (`moetune inspect --tokens N --recompute MODE` sizes a layer's).
    int64_t recompute_keep_layers = 0;
    // micro_batch_size: auto. The trainer picks the largest micro-batch the memory plan fits on the GPU
    // (train/micro_batch_fit.h), turning recomputation on when not even one row fits without it.
    bool micro_batch_auto = false;
    // The GPU engine's fused LM head + loss runs the rows in chunks of this many (ops/cuda/linear_cross_entropy.h),
    // each holding [rows, vocabulary] bf16 logits; the memory plan counts the same. 0: as many whole 256-row
    // blocks as fit 640 MiB of logits (ops/lm_head_chunk.h; 2048 rows at Moonlight's 163,840 classes).
    int64_t lm_head_chunk_rows = 0;
  } training;

  struct Optimizer {
    double lr = 1e-5;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double weight_decay = 0.0;
    double max_grad_norm = 1.0;           // 0 disables clipping
    std::string precision = "fp32";       // fp32 (CPU); GPU: fp32_master, bf16_stochastic_rounding, pure_bf16
    // AdamW's moments: fp32 | int8. "fp32" keeps them as `precision` says (f32, or bf16 in the bf16 modes);
    // "int8" keeps both as 8-bit blockwise codes (train/adamw.h) under any precision, whose weights and master
    // copy stay as they are.
    std::string state = "fp32";
    // The GPU engine on one rank: AdamW applied to each layer as soon as the backward pass has its gradients,
    // which are then dropped (train/cuda/update_in_backward.h): the model's gradients never all exist at once.
    // Exact only without clipping (max_grad_norm 0) and without gradient accumulation. auto: on exactly then;
    // on: fails naming what stands in the way; off: the step after the backward pass.
    std::string update_in_backward = "auto";
    // The GPU engine on one rank: AdamW on the input embedding's rows of the step's tokens only, the other rows
    // brought up to date when they are read (ops/cuda/adamw_rows.h); meant to be bit-identical to the update of
    // the whole table. auto: wherever it applies (an untied, trainable embedding; not with update_in_backward or
    // 8-bit state); off: the whole table every step. tests/gpu/test_lazy_embedding_gpu.cpp checks it bit for bit
    // against off (H200, session 9); on Moonlight's 4-layer cut it is ~0.8 ms a step faster (107,570-108,466
    // tokens/s against 106,678-106,858, same call).
    std::string lazy_embedding = "auto";
    // The GPU engine on one rank, with clipping: the norm's pass over the gradients started in the last
    // micro-batch's backward pass, each layer's as soon as it is done, on a stream of its own
    // (train/cuda/overlapped_grad_norm.h; the same bits). Off by default: on Moonlight's 4-layer cut it made the step
    // slower, 110,229 → 108,387 tokens/s (H200, session 9: its reads slow the backward GEMMs beside them more than
    // the 1.2 ms pass it hides).
    std::string norm_in_backward = "off";
    // The GPU engine on one rank, with clipping after the backward pass, one micro-batch a step: the experts'
    // weight-gradient GEMMs sum the squares they write (model/cuda/expert_norm_partials.h), and the norm's pass
    // reads every other gradient only. Fixed bits run to run, not the pass's (other partial sums, ~1e-7 apart).
    std::string norm_from_expert_gemms = "on";
  } optimizer;

  struct Schedule {
    std::string type = "cosine";          // constant, linear, cosine
    int64_t warmup_steps = 0;
    double min_lr_ratio = 0.0;
  } schedule;

  struct Output {
    std::string dir = "moetune-output";
    int64_t save_every = 0;               // steps between checkpoints; 0: only at the end
    int64_t keep_last = 2;
    bool save_final = true;               // false: no checkpoint at the end (benchmarks)
  } output;

  struct Logging {
    int64_t every = 1;                    // steps between log lines and metrics records
    int64_t validation_every = 0;         // steps between validation losses; 0: only at the end
    bool tensorboard = true;
  } logging;

  // Several ranks (mpirun / srun / --nproc-per-node): the data-parallel size is the world size.
  struct Parallel {
    int64_t expert = 1;                   // expert-parallel size: divides the world size and the experts
    // Several ranks: a rank that makes no progress (a step, a checkpoint, validation) for this long ends
    // itself, since a dead or stuck peer would leave it waiting in a collective forever.
    double timeout_seconds = 1800;
    // The GPU engine overlaps communication with compute: ZeRO's gradient reduce-scatter runs during the
    // backward pass, and the experts' d(x) all-to-all beside their weight-gradient GEMMs. false runs them in line
    // (to measure what the overlap saves).
    bool overlap = true;
  } parallel;

  // LoRA (model/lora_config.h): rank 0 trains every weight. `adapter`: start from a PEFT adapter folder (its
  // adapter_config.json then gives the settings; rank, if set, must agree). `quantize`: none, or nf4 for QLoRA
  // (the frozen projection and expert weights quantized to NF4 at load, model/nf4_weights.h).
  struct Lora {
    model::LoraConfig settings;
    std::string adapter;
    std::string quantize = "none";
  } lora;

  nlohmann::json json;  // the resolved recipe, every key present: what the run saves beside its outputs
};

// `path` empty: the defaults alone. `overrides` are "a.b=value" strings, the value parsed as YAML.
Recipe load_recipe(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
// The same from YAML text (for the embedded default recipe and tests); `source` names it in errors.
Recipe parse_recipe(const std::string& yaml_text, const std::string& source, const std::vector<std::string>& overrides = {});

}  // namespace moetune::train
