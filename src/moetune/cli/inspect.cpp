#include "moetune/cli/inspect.h"

#include <fmt/format.h>

#include <cmath>

#include "moetune/model/checkpoint.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/expert_shard.h"
#include "moetune/model/model_description.h"
#include "moetune/ops/adamw_math.h"
#include "moetune/parallel/parallel_layout.h"

namespace moetune::cli {

using nlohmann::json;

namespace {

// A gated MLP whose gate is not SiLU (hidden_act): ", gelu-gated" and the like; SwiGLU says nothing.
std::string gate_note(const model::MlpSpec& mlp) {
  if (mlp.activation != model::Activation::SwiGLU || mlp.gate == ops::GateFunction::Silu) return "";
  return fmt::format(", {}-gated", ops::gate_function_name(mlp.gate));
}

std::string sublayer_kind(const model::SublayerSpec& sublayer) {
  if (const model::AttentionSpec* a = sublayer.attention(); a && a->mla)  // DeepSeek-V3
    return fmt::format("latent attention (q_lora {}, kv_lora {}, q/k head {} with rope {}, v head {})",
                       a->mla->q_lora_rank ? std::to_string(*a->mla->q_lora_rank) : "none", a->mla->kv_lora_rank,
                       a->qk_head_dim, a->mla->qk_rope_head_dim, a->v_head_dim);
  if (const model::AttentionSpec* a = sublayer.attention())
    return (a->sliding_window ? fmt::format("sliding_attention ({})", *a->sliding_window) : "full_attention") +
           (a->sinks ? " with sinks" : "") + (a->output_gate ? " with output gate" : "");
  if (const model::MlpSpec* m = sublayer.mlp())
    return fmt::format("dense mlp (intermediate {}{}{})", m->intermediate,
                       m->activation == model::Activation::ReluSquared ? ", relu²" : "", gate_note(*m));
  if (const model::Mamba2Spec* m = sublayer.mamba2())
    return fmt::format("mamba2 ({} heads of {}, state {}, {} groups, conv {})", m->num_heads, m->head_dim, m->state_size,
                       m->num_groups, m->conv_kernel);
  if (const model::GatedDeltaSpec* g = sublayer.gated_delta())
    return fmt::format("gated deltanet ({} key heads of {}, {} value heads of {}, conv {})", g->num_k_heads,
                       g->k_head_dim, g->num_v_heads, g->v_head_dim, g->conv_kernel);
  const model::MoeSpec& m = *sublayer.moe();
  std::string text = fmt::format("moe (experts {}, top-{}, moe_intermediate {}", m.router.num_experts, m.router.top_k,
                                 m.experts.intermediate);
  if (m.shared_expert)
    text += fmt::format(", shared expert {}{}", m.shared_expert->mlp.intermediate, m.shared_expert->sigmoid_gate ? " gated" : "");
  if (m.router.score == model::RouterScore::Sigmoid)
    text += fmt::format(", sigmoid router: top-{} of {} groups, scale {}", m.router.topk_groups, m.router.num_groups,
                        m.router.scaling_factor);
  if (m.router.topk_before_softmax) text += ", softmax over the top-k";
  if (m.experts.activation == model::Activation::ClampedSwiGLU)
    text += fmt::format(", clamped swiglu (limit {})", m.experts.clamp.limit);
  if (m.experts.activation == model::Activation::ReluSquared) text += ", relu²";
  text += gate_note(m.experts);
  if (m.latent_size) text += fmt::format(", latent {}", *m.latent_size);
  return text + ")";
}

std::string layer_kind(const model::LayerSpec& layer) {
  std::string text;
  for (const model::SublayerSpec& sublayer : layer.sublayers) text += (text.empty() ? "" : " + ") + sublayer_kind(sublayer);
  return text;
}

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
  return fmt::format("{}", n);
}

std::string human_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  return fmt::format("{:.2f} KB", bytes / 1e3);
}

}  // namespace

json inspect_model(const std::filesystem::path& folder, int64_t tokens, model::Recompute recompute, bool update_in_backward,
                   int64_t lm_head_chunk_rows) {
  const model::ParameterLayout layout = model::parameter_layout(model::load_model_spec_for(folder));
  const model::ModelSpec& c = layout.spec;
  static const model::AttentionSpec kNoAttention{};  // a model of recurrent and feed-forward layers only
  const model::AttentionSpec* first_attention = nullptr;
  const model::MoeSpec* moe = nullptr;
  int64_t intermediate = 0;
  for (const model::LayerSpec& layer : c.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers) {
      if (!first_attention) first_attention = sublayer.attention();
      if (!moe) moe = sublayer.moe();
      if (sublayer.mlp() && !intermediate) intermediate = sublayer.mlp()->intermediate;
    }
  // A folder with config.json alone (a model not downloaded yet) is counted and planned from the config; weights,
  // where present, must match the layout.
  size_t weight_files = 0;
  int64_t carried = 0;  // a vision-language model's vision tower: counted as transformers counts it, not trained
  if (io::SafetensorsFolder::holds_weights(folder)) {
    const io::SafetensorsFolder files = io::SafetensorsFolder::open(folder);
    model::match_checkpoint(layout, files);
    weight_files = files.shard_count();
    for (const std::string& name : files.names())
      if (model::is_carried_tensor(c, name)) carried += shape_numel(files.entry(name).shape);
  }

  const model::AttentionSpec& attention = first_attention ? *first_attention : kNoAttention;
  json report;
  report["model"] = folder.string();
  report["architecture"] = c.architecture;
  report["model_type"] = c.family;
  report["checkpoint_dtype"] = c.dtype ? std::string(dtype_torch_name(*c.dtype)) : "unspecified";
  report["weight_files"] = weight_files;
  report["config"] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_layers()},
      {"num_attention_heads", attention.num_heads},
      {"num_key_value_heads", attention.num_kv_heads},
      {"head_dim", attention.qk_head_dim},
      {"intermediate_size", intermediate},
      {"num_experts", moe ? moe->router.num_experts : 0},
      {"num_experts_per_tok", moe ? moe->router.top_k : 0},
      {"moe_intermediate_size", moe ? moe->experts.intermediate : 0},
      {"norm_topk_prob", moe && moe->router.renormalize},
      {"shared_expert_intermediate_size", moe && moe->shared_expert ? moe->shared_expert->mlp.intermediate : 0},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"rope_type", attention.rope.type},
      {"rope_theta", attention.rope.theta},
      {"softmax_scale", attention.softmax_scale()},
      {"embedding_scale", c.embedding_scale},
      {"residual_scale", c.layers.empty() ? 1.0 : c.layers[0].sublayers[0].residual_scale},
      {"logits_divisor", c.logits_divisor},
      {"norm_weight_offset", c.final_norm_weight_offset}};
  json layers = json::array();
  for (const model::LayerSpec& layer : c.layers) layers.push_back(layer_kind(layer));
  report["layers"] = layers;

  json parameters = json::array();
  for (const auto& spec : layout.parameters)
    parameters.push_back({{"name", spec.name}, {"shape", spec.shape}, {"hf_tensors", spec.pieces.size()}});
  report["parameters"] = parameters;

  const int64_t total = layout.total_parameters();
  int64_t state_blocks = 0;  // 8-bit AdamW state: one absmax per block of each tensor
  for (const auto& spec : layout.parameters) state_blocks += ops::adamw_state_blocks(shape_numel(spec.shape));
  report["total_parameters"] = total + carried;
  if (carried > 0) report["carried_parameters"] = carried;  // read and saved back unchanged, never trained
  report["active_parameters"] = layout.active_parameters();
  report["active_matmul_parameters"] = layout.active_matmul_parameters();
  // The gradients the step holds at once: every parameter's, or one decoder layer's beside the rest.
  const int64_t dropped = update_in_backward ? total - model::gradient_parameters_held(layout, true) : 0;
  json memory = json::array();
  for (const auto& plan : model::precision_plans())
    memory.push_back({{"precision", plan.name},
                      {"description", plan.description},
                      {"bytes_per_parameter", plan.bytes_per_parameter()},
                      {"weights_bytes", plan.weight_bytes * total},
                      {"gradients_bytes", plan.gradient_bytes * (total - dropped)},
                      {"master_weights_bytes", plan.master_bytes * total},
                      {"optimizer_state_bytes", plan.optimizer_state_bytes(total, state_blocks)},
                      {"total_bytes", plan.static_bytes(total, state_blocks) - plan.gradient_bytes * dropped}});
  report["memory"] = memory;
  report["memory_note"] = "static memory for the whole run; activations depend on the recipe and are added by the training step's plan";
  report["update_in_backward"] = update_in_backward;
  if (tokens > 0) {
    const model::ActivationPlan plan = model::gpu_activation_plan(c, tokens, recompute, 0, lm_head_chunk_rows);
    json stash = json::object();
    for (const auto& [block, bytes] : plan.stash) stash[block] = bytes;
    json peaks = json::object();
    for (const json& m : memory)
      if (!m["precision"].get<std::string>().starts_with("cpu_fp32")) peaks[m["precision"].get<std::string>()] = m["total_bytes"].get<int64_t>() + plan.total();
    report["gpu_step"] = {{"tokens", tokens},           {"recompute", model::recompute_name(recompute)}, {"stash_bytes", stash},
                          {"stash_total_bytes", plan.stash_bytes}, {"peak_phase", plan.peak_phase},
                          {"transient_bytes", plan.transient_bytes}, {"workspace_bytes", plan.workspace_bytes},
                          {"activation_bytes", plan.total()},      {"predicted_peak_bytes", peaks}};
  }
  return report;
}

void add_expert_parallel_plan(json& report, const std::filesystem::path& folder, int world, int expert, int64_t tokens) {
  const model::ParameterLayout layout = model::parameter_layout(model::load_model_spec(folder / "config.json"));
  const int64_t experts = model::experts_per_layer(layout.spec);
  const parallel::ParallelLayout ranks = parallel::make_layout(world, 0, expert, experts);
  int64_t dense = 0, expert_parameters = 0;
  for (const model::ParameterSpec& p : layout.parameters)
    (p.placement == model::Placement::ExpertSharded ? expert_parameters : dense) += shape_numel(p.shape);
  // A rank holds the dense parameters and 1/expert of the experts, with their gradients; the optimizer state
  // (and fp32 master copy) is sharded: the dense part over the world, its experts over their replicas.
  const int64_t held = dense + expert_parameters / expert;
  const int64_t sharded = (dense + world - 1) / world + (expert_parameters / expert + ranks.expert_replicas() - 1) / ranks.expert_replicas();
  json per_rank = json::array();
  for (const auto& plan : model::precision_plans()) {
    const int64_t total = (plan.weight_bytes + plan.gradient_bytes) * held + plan.master_bytes * sharded +
                          plan.optimizer_state_bytes(sharded, ops::adamw_state_blocks(sharded));
    per_rank.push_back({{"precision", plan.name}, {"total_bytes", total}});
  }
  json plan = {{"world", world}, {"expert", expert}, {"dense_parameters", dense}, {"expert_parameters_per_rank", expert_parameters / expert},
               {"optimizer_state_parameters_per_rank", sharded}, {"static_bytes_per_rank", per_rank}};
  if (tokens > 0 && experts > 0) {
    int64_t top_k = 0;
    for (const model::LayerSpec& layer : layout.spec.layers)
      for (const model::SublayerSpec& sublayer : layer.sublayers)
        if (sublayer.moe()) top_k = sublayer.moe()->router.top_k;
    // Each token travels once to each rank holding one of its experts (model/token_exchange.h): a rank receives
    // at most every token of its group, and, with uniform routing, each token with the chance that one of its k
    // distinct experts is among the rank's E/expert. Its experts then compute T·k rows on average.
    const int64_t row_bytes = layout.spec.hidden_size * 2;  // bf16 rows
    const int64_t local = experts / expert;
    double misses = 1.0;  // the chance that none of a token's k experts is here: C(E - L, k) / C(E, k)
    for (int64_t j = 0; j < top_k; ++j) misses *= double(experts - local - j) / double(experts - j);
    plan["receive_rows_balanced"] = int64_t(std::llround(double(tokens * expert) * (1.0 - std::max(misses, 0.0))));
    plan["receive_rows_worst"] = tokens * expert;
    plan["receive_bytes_worst"] = tokens * expert * row_bytes;
    plan["expert_rows_balanced"] = tokens * top_k;
    plan["expert_rows_worst"] = tokens * expert * std::min(top_k, local);
  }
  report["expert_parallel"] = plan;
}

std::string format_inspection(const json& r) {
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  const json& c = r["config"];
  const int64_t files = r["weight_files"].get<int64_t>();
  line(fmt::format("{}  ({}, {} weights {})", r["model"].get<std::string>(), r["architecture"].get<std::string>(),
                   r["checkpoint_dtype"].get<std::string>(),
                   files > 0 ? fmt::format("in {} file(s)", files) : "not here: planned from config.json alone"));
  const std::string rope = c["rope_type"].get<std::string>();
  line(fmt::format("  hidden {}, {} layers, {} q / {} kv heads of {}, vocab {}, {}{}", c["hidden_size"].get<int64_t>(),
                   c["num_hidden_layers"].get<int64_t>(), c["num_attention_heads"].get<int64_t>(),
                   c["num_key_value_heads"].get<int64_t>(), c["head_dim"].get<int64_t>(), c["vocab_size"].get<int64_t>(),
                   rope == "none" ? "no rope" : fmt::format("rope {} (theta {})", rope, c["rope_theta"].get<double>()),
                   c["tie_word_embeddings"].get<bool>() ? ", tied embeddings" : ""));
  // Gemma's departures from the usual decoder: the scaled embedding and the norms' 1 + weight; Granite's multipliers.
  if (c.value("embedding_scale", 1.0) != 1.0 || c.value("norm_weight_offset", 0.0) != 0.0)
    line(fmt::format("  embedding rows times {:.6g}, norms scaling by {} + weight, softmax scale {:.6g}",
                     c.value("embedding_scale", 1.0), c.value("norm_weight_offset", 0.0),
                     c.value("softmax_scale", 0.0)));
  if (c.value("residual_scale", 1.0) != 1.0 || c.value("logits_divisor", 1.0) != 1.0)
    line(fmt::format("  sublayer outputs times {:.6g} before the residual add, logits divided by {:.6g}",
                     c.value("residual_scale", 1.0), c.value("logits_divisor", 1.0)));
  line("layers:");
  // Runs of identical layers print as one line.
  const json& layers = r["layers"];
  for (size_t begin = 0; begin < layers.size();) {
    size_t end = begin + 1;
    while (end < layers.size() && layers[end] == layers[begin]) ++end;
    std::string range = end - begin == 1 ? fmt::format("{}", begin) : fmt::format("{}-{}", begin, end - 1);
    line(fmt::format("  {:>7}  {}", range, layers[begin].get<std::string>()));
    begin = end;
  }
  line("parameters (engine layout; layer 0 and the model-level ones):");
  for (const json& p : r["parameters"]) {
    std::string name = p["name"].get<std::string>();
    if (name.starts_with("layers.") && !name.starts_with("layers.0.")) continue;
    line(fmt::format("  {:<28} {}", name, shape_str(p["shape"].get<Shape>())));
  }
  const auto total = r["total_parameters"].get<int64_t>(), active = r["active_parameters"].get<int64_t>();
  line(fmt::format("total parameters  {:>16}  ({})", total, human_count(double(total))));
  line(fmt::format("active per token  {:>16}  ({})", active, human_count(double(active))));
  line("full fine-tune memory (static; activations come on top, per recipe):");
  for (const json& m : r["memory"])
    line(fmt::format("  {:<30} {:>10}  ({:g} B/param: {})", m["precision"].get<std::string>(),
                     human_bytes(m["total_bytes"].get<double>()), m["bytes_per_parameter"].get<double>(),
                     m["description"].get<std::string>()));
  if (r.contains("gpu_step")) {
    const json& g = r["gpu_step"];
    line(fmt::format("GPU training step at {} tokens per micro-batch, recompute {}:", g["tokens"].get<int64_t>(),
                     g["recompute"].get<std::string>()));
    for (const auto& [block, bytes] : g["stash_bytes"].items())
      line(fmt::format("  stash {:<20} {:>10}", block, human_bytes(bytes.get<double>())));
    line(fmt::format("  temporaries ({}) {:>10}", g["peak_phase"].get<std::string>(), human_bytes(g["transient_bytes"].get<double>())));
    line(fmt::format("  workspaces {:>20}", human_bytes(g["workspace_bytes"].get<double>())));
    line("predicted peak (static + activations):");
    for (const auto& [precision, bytes] : g["predicted_peak_bytes"].items())
      line(fmt::format("  {:<30} {:>10}", precision, human_bytes(bytes.get<double>())));
  }
  if (r.contains("expert_parallel")) {
    const json& e = r["expert_parallel"];
    line(fmt::format("per rank, {} ranks with expert parallel {} (ZeRO-2 optimizer state):", e["world"].get<int>(),
                     e["expert"].get<int>()));
    line(fmt::format("  dense {} + experts {} held; optimizer state for {}", human_count(e["dense_parameters"].get<double>()),
                     human_count(e["expert_parameters_per_rank"].get<double>()),
                     human_count(e["optimizer_state_parameters_per_rank"].get<double>())));
    for (const json& m : e["static_bytes_per_rank"])
      line(fmt::format("  {:<30} {:>10}", m["precision"].get<std::string>(), human_bytes(m["total_bytes"].get<double>())));
    if (e.contains("receive_rows_worst")) {
      line(fmt::format("  all-to-all receive rows (tokens) per MoE layer: {} balanced, {} at most ({} in bf16)",
                       e["receive_rows_balanced"].get<int64_t>(), e["receive_rows_worst"].get<int64_t>(),
                       human_bytes(e["receive_bytes_worst"].get<double>())));
      line(fmt::format("  expert rows computed per MoE layer: {} balanced, {} at most",
                       e["expert_rows_balanced"].get<int64_t>(), e["expert_rows_worst"].get<int64_t>()));
    }
  }
  return out + format_lora_plan(r);
}

}  // namespace moetune::cli
