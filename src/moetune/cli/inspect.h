// `moetune inspect MODEL_DIR`: what a model folder holds and what fine-tuning it costs in memory.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "moetune/model/lora_config.h"
#include "moetune/model/recompute.h"

namespace moetune::cli {

// Reads config.json and checks the weights against it (headers only: no tensor bytes are read). With
// `tokens` > 0 (micro-batch × sequence length) the report adds the GPU training step's activation plan and the
// predicted peak per precision.
// `recompute`, `update_in_backward` (optimizer.update_in_backward: the decoder layers' gradients one layer at
// a time) and `lm_head_chunk_rows` (training.lm_head_chunk_rows, 0: auto) change the plan as those recipe keys
// change the step.
nlohmann::json inspect_model(const std::filesystem::path& folder, int64_t tokens = 0,
                             model::Recompute recompute = model::Recompute::None, bool update_in_backward = false,
                             int64_t lm_head_chunk_rows = 0);

// The per-rank share under expert parallelism `expert` on `world` ranks (ZeRO-2 for the optimizer state), and
// with `tokens` per micro-batch the token all-to-all's receive rows: balanced routing and the dropless worst
// case (every token of the group routed here). Added to `report` as "expert_parallel".
void add_expert_parallel_plan(nlohmann::json& report, const std::filesystem::path& folder, int world, int expert, int64_t tokens);
std::string format_inspection(const nlohmann::json& report);

// What a LoRA fine-tune with `lora` trains (adapter parameters) and holds (frozen base weights, adapters with
// their gradients and optimizer state), per precision; added as "lora" (cli/inspect_lora.cpp).
void add_lora_plan(nlohmann::json& report, const std::filesystem::path& folder, const model::LoraConfig& lora);
std::string format_lora_plan(const nlohmann::json& report);

}  // namespace moetune::cli
