#include "moetune/model/causal_lm.h"

#include <numeric>

#include "moetune/model/block_util.h"
#include "moetune/model/router_bias_balance.h"
#include "moetune/ops/embedding.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/loss.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

CausalLM CausalLM::from_pretrained(const std::filesystem::path& folder) {
  return CausalLM(load_checkpoint(folder, LoadOptions{DType::F32}), {});
}

CausalLM::CausalLM(ModelWeights weights, const DispatcherFactory<CpuBlocks>& make_dispatcher) : store_(std::make_unique<ParameterStore>(std::move(weights))) {
  for (size_t i = 0; i < store_->values().size(); ++i)
    MOETUNE_CHECK(store_->values()[i].dtype() == DType::F32 && store_->values()[i].device().is_cpu(),
                  "the CPU engine trains fp32 parameters; '{}' is {}", store_->weights().layout.parameters[i].name,
                  store_->values()[i].str());
  sublayers_ = build_sublayers<CpuBlocks>(spec(), *store_, make_dispatcher);
  store_->require_lora_adapters_looked_up();
}

Tensor CausalLM::run_layers(const Tensor& input_ids, StepContext& context) {
  const Tensor embedded =
      ops::embedding_forward(input_ids.view({-1}), store_->get("embed_tokens").value, float(spec().embedding_scale));
  return walk_forward(sublayers_, embedded, context);
}

std::vector<ops::Routing> CausalLM::routings() const {
  std::vector<ops::Routing> routings;
  for (const auto& b : sublayers_)
    if (b.moe) routings.push_back(b.moe->routing());
  return routings;
}

void CausalLM::force_routing(const std::vector<std::vector<int32_t>>& chosen_per_moe_layer) {
  size_t moe_index = 0;
  for (auto& b : sublayers_) {
    if (!b.moe) continue;
    b.moe->force_choices(moe_index < chosen_per_moe_layer.size() ? chosen_per_moe_layer[moe_index] : std::vector<int32_t>{});
    ++moe_index;
  }
  MOETUNE_CHECK(chosen_per_moe_layer.empty() || chosen_per_moe_layer.size() == moe_index,
                "force_routing: {} choice lists for {} MoE layers", chosen_per_moe_layer.size(), moe_index);
}

Tensor CausalLM::head_logits(const Tensor& final_hidden) const {
  const ModelSpec& c = spec();
  const Param head = store_->get(c.tie_word_embeddings ? "embed_tokens" : "lm_head");
  return divided_by_logits_scaling(ops::linear_forward(
      ops::rms_norm_forward(final_hidden, store_->get("final_norm").value, c.norm_eps, c.final_norm_weight_offset),
      head.value));
}

Tensor CausalLM::divided_by_logits_scaling(Tensor logits) const {
  const float divisor = float(spec().logits_divisor);
  if (divisor == 1.0f) return logits;
  float* values = logits.data<float>();
  for (int64_t i = 0; i < logits.numel(); ++i) values[i] /= divisor;  // transformers divides (not by 1 / s)
  return logits;
}

Tensor CausalLM::next_token_logits(const std::vector<int64_t>& ids, DecodeCache& decode_cache) {
  MOETUNE_CHECK(!ids.empty(), "next_token_logits: no new tokens");
  auto* kv = dynamic_cast<KvCache*>(&decode_cache);
  MOETUNE_CHECK(kv, "next_token_logits: the cache was made by another device's model");
  KvCache& cache = *kv;
  const int64_t count = int64_t(ids.size());
  std::vector<int64_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), cache.tokens());
  const Tensor input_ids = Tensor::from_vector(ids, {1, count});
  StepContext context;
  context.layout = sequence_layout(input_ids, Tensor::from_vector(positions, {1, count}), Tensor());
  require_rope_positions(spec(), context.layout);
  context.kv_cache = &cache;
  cache.start_pass(count);
  const Tensor hidden = run_layers(input_ids, context);
  cache.finish_pass();
  clear_stash();
  return head_logits(hidden.narrow(count - 1, 1)).view({-1});
}

CausalLMOutput CausalLM::forward(const Batch& batch) {
  const ModelSpec& c = spec();
  MOETUNE_CHECK(batch.input_ids.dim() == 2 && batch.input_ids.dtype() == DType::I64,
                "forward: input_ids must be I64 [B, S], got {}", batch.input_ids.str());
  const int64_t rows = batch.input_ids.size(0), seq = batch.input_ids.size(1);
  stash_ = {};
  stash_.input_ids = batch.input_ids;
  stash_.context.layout = sequence_layout(batch.input_ids, batch.position_ids, batch.attention_mask);
  require_rope_positions(c, stash_.context.layout);
  stash_.context.training = training_;
  stash_.context.lora_draw = lora_draw_;
  stash_.final_hidden = run_layers(batch.input_ids, stash_.context);
  stash_.logits = head_logits(stash_.final_hidden);

  CausalLMOutput output;
  output.logits = stash_.logits.view({rows, seq, c.vocab_size});
  if (!batch.labels.defined()) return output;
  MOETUNE_CHECK(batch.labels.shape() == batch.input_ids.shape(), "forward: labels {} for input_ids {}", batch.labels.str(),
                batch.input_ids.str());
  stash_.targets = ops::shift_labels(batch.labels);
  const ops::CrossEntropy ce = ops::cross_entropy(stash_.logits, stash_.targets);
  output.num_tokens = ce.count;
  const double divisor = batch.num_items_in_batch.value_or(double(ce.count));
  stash_.lm_scale = divisor > 0 ? 1.0 / divisor : 0.0;
  output.lm_loss = ce.loss_sum * stash_.lm_scale;
  output.loss = output.lm_loss;
  if (c.aux_loss == AuxLoss::LoadBalancing && batch.output_router_logits.value_or(c.aux_loss_by_default)) {
    output.aux_loss = ops::aux_loss_value(routings(), stash_.context.layout.token_valid);
    stash_.aux_scale = c.aux_loss_coef;
    output.loss += stash_.aux_scale * output.aux_loss;
  }
  stash_.ready = true;
  return output;
}

Tensor CausalLM::forward(const Tensor& input_ids, const Tensor& position_ids) {
  return logits({.input_ids = input_ids, .position_ids = position_ids});
}

CausalLMOutput CausalLM::forward_backward(const Batch& batch) {
  MOETUNE_CHECK(batch.labels.defined(), "forward_backward needs labels");
  training_ = true;
  CausalLMOutput out = forward(batch);
  training_ = false;
  ++lora_draw_;
  last_router_stats_ = router_stats();  // read while the stash holds the routing
  const std::vector<ops::Routing> layers = routings();
  pending_load_.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) add_expert_load(layers[i], stash_.context.layout.token_valid, pending_load_[i]);
  backward();
  return out;
}

CausalLMOutput CausalLM::loss(const Batch& batch) {
  MOETUNE_CHECK(batch.labels.defined(), "loss needs labels");
  CausalLMOutput out = forward(batch);
  clear_stash();
  out.logits = Tensor();
  return out;
}

Tensor CausalLM::logits(const Batch& batch) {
  Batch inputs = batch;
  inputs.labels = Tensor();
  Tensor logits = forward(inputs).logits;
  clear_stash();
  return logits;
}

void CausalLM::clear_stash() {
  for (auto& b : sublayers_) b.clear_stash();
  stash_ = {};
}

void CausalLM::backward() {
  MOETUNE_CHECK(stash_.ready, "backward() needs a forward() with labels first (and only one backward per forward)");
  const ModelSpec& c = spec();
  const Param head = store_->get(c.tie_word_embeddings ? "embed_tokens" : "lm_head");
  const Param final_norm = store_->get("final_norm");
  // d(logits) / logits_scaling: the head's output was divided by it.
  const Tensor dlogits =
      divided_by_logits_scaling(ops::cross_entropy_backward(stash_.logits, stash_.targets, stash_.lm_scale));
  const float offset = c.final_norm_weight_offset;
  const Tensor normed = ops::rms_norm_forward(stash_.final_hidden, final_norm.value, c.norm_eps, offset);
  Tensor dh = ops::linear_backward(dlogits, normed, head.value, head.grad);
  dh = ops::rms_norm_backward(dh, stash_.final_hidden, final_norm.value, c.norm_eps, final_norm.grad, offset);

  // The aux loss reads every MoE layer's router logits at once; its gradient is handed to each layer.
  if (stash_.aux_scale != 0) {
    const std::vector<ops::Routing> all = routings();
    for (const ops::Routing& routing : all)
      stash_.context.drouter_logits.push_back(Tensor::zeros(routing.logits.shape(), DType::F32));
    ops::aux_loss_backward(all, stash_.context.layout.token_valid, stash_.aux_scale, stash_.context.drouter_logits);
  }
  dh = walk_backward(sublayers_, dh, stash_.context);
  ops::embedding_backward(dh, stash_.input_ids.view({-1}), store_->get("embed_tokens").grad,
                          c.embedding_padding_idx.value_or(-1), float(c.embedding_scale));
  stash_ = {};
}

void CausalLM::save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options) const {
  model::save_checkpoint(store_->weights(), folder, options);
}

std::vector<std::pair<std::string, size_t>> CausalLM::stash_report() const {
  std::vector<std::pair<std::string, size_t>> report;
  for (const auto& b : sublayers_)
    report.emplace_back(b.name, b.stash_bytes());
  report.emplace_back("head", held_bytes({&stash_.final_hidden, &stash_.logits}));
  return report;
}

std::vector<std::pair<int64_t, ops::RouterStats>> CausalLM::router_stats() const {
  std::vector<std::pair<int64_t, ops::RouterStats>> stats;
  for (const auto& b : sublayers_)
    if (b.moe && b.moe->routing().logits.defined())
      stats.emplace_back(b.layer, ops::router_stats(b.moe->routing(), stash_.context.layout.token_valid));
  return stats.empty() ? last_router_stats_ : stats;  // after backward(): the last forward_backward's
}

size_t CausalLM::stash_bytes() const {
  size_t total = 0;
  for (const auto& [block, bytes] : stash_report()) total += bytes;
  return total;
}

void CausalLM::update_router_bias(double rate) {
  size_t moe_index = 0;
  for (const auto& b : sublayers_) {
    if (!b.moe) continue;
    const Param bias = store_->find(fmt::format("layers.{}.moe.router_correction_bias", b.layer));
    if (!bias.defined())
      fail("training.router_bias_update_rate: layer {} of this {} has no router correction bias to move", b.layer,
           spec().architecture);
    if (moe_index < pending_load_.size()) balance_correction_bias(bias.value, pending_load_[moe_index], rate);
    ++moe_index;
  }
  pending_load_.clear();
}

}  // namespace moetune::model
