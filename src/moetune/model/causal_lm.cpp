#include "moetune/model/causal_lm.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/embedding.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/loss.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

CausalLM CausalLM::from_pretrained(const std::filesystem::path& folder) {
  return CausalLM(io::load_checkpoint(folder, io::LoadOptions{DType::F32}));
}

CausalLM::CausalLM(io::ModelWeights weights) : store_(std::make_unique<ParameterStore>(std::move(weights))) {
  for (size_t i = 0; i < store_->values().size(); ++i)
    MOETUNE_CHECK(store_->values()[i].dtype() == DType::F32 && store_->values()[i].device().is_cpu(),
                  "the CPU engine trains fp32 parameters; '{}' is {}", store_->weights().layout.parameters[i].name,
                  store_->values()[i].str());
  const io::ModelConfig& c = config();
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string prefix = fmt::format("layers.{}.", layer);
    Layer& l = layers_.emplace_back(Layer{AttentionBlock(*store_, prefix, c), std::nullopt, std::nullopt});
    if (c.is_moe_layer(layer))
      l.moe.emplace(*store_, prefix, c);
    else
      l.dense.emplace(*store_, prefix, c);
  }
}

Tensor CausalLM::run_layers(const Tensor& input_ids, const SequenceLayout& layout) {
  Tensor h = ops::embedding(input_ids.view({-1}), store_->get("embed_tokens").value);
  for (Layer& layer : layers_) {
    h = layer.attention.forward(h, layout);
    h = layer.moe ? layer.moe->forward(h) : layer.dense->forward(h);
  }
  return h;
}

CausalLMOutput CausalLM::forward(const Batch& batch) {
  const io::ModelConfig& c = config();
  MOETUNE_CHECK(batch.input_ids.dim() == 2 && batch.input_ids.dtype() == DType::I64,
                "forward: input_ids must be I64 [B, S], got {}", batch.input_ids.str());
  const int64_t rows = batch.input_ids.size(0), seq = batch.input_ids.size(1);
  stash_ = {};
  stash_.input_ids = batch.input_ids;
  stash_.layout = sequence_layout(c, batch.input_ids, batch.position_ids, batch.attention_mask);
  stash_.final_hidden = run_layers(batch.input_ids, stash_.layout);
  const Param head = store_->get(c.tie_word_embeddings ? "embed_tokens" : "lm_head");
  stash_.logits = ops::linear(ops::rms_norm(stash_.final_hidden, store_->get("final_norm").value, c.rms_norm_eps), head.value);

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
  if (c.is_moe() && batch.output_router_logits.value_or(c.output_router_logits)) {
    std::vector<ops::Routing> routings;
    for (const Layer& layer : layers_)
      if (layer.moe) routings.push_back(layer.moe->routing());
    output.aux_loss = ops::load_balancing_loss(routings, stash_.layout.token_valid);
    stash_.aux_scale = c.router_aux_loss_coef;
    output.loss += stash_.aux_scale * output.aux_loss;
  }
  stash_.ready = true;
  return output;
}

Tensor CausalLM::forward(const Tensor& input_ids, const Tensor& position_ids) {
  Batch batch;
  batch.input_ids = input_ids;
  batch.position_ids = position_ids;
  Tensor logits = forward(batch).logits;
  clear_stash();
  return logits;
}

void CausalLM::clear_stash() {
  for (Layer& layer : layers_) {
    layer.attention.clear_stash();
    if (layer.moe) layer.moe->clear_stash();
    if (layer.dense) layer.dense->clear_stash();
  }
  stash_ = {};
}

void CausalLM::backward() {
  MOETUNE_CHECK(stash_.ready, "backward() needs a forward() with labels first (and only one backward per forward)");
  const io::ModelConfig& c = config();
  const Param head = store_->get(c.tie_word_embeddings ? "embed_tokens" : "lm_head");
  const Param final_norm = store_->get("final_norm");
  const Tensor dlogits = ops::cross_entropy_backward(stash_.logits, stash_.targets, stash_.lm_scale);
  const Tensor normed = ops::rms_norm(stash_.final_hidden, final_norm.value, c.rms_norm_eps);
  Tensor dh = ops::linear_backward(dlogits, normed, head.value, head.grad);
  dh = ops::rms_norm_backward(dh, stash_.final_hidden, final_norm.value, c.rms_norm_eps, final_norm.grad);

  // The aux loss reads every MoE layer's router logits at once; its gradient is handed to each layer.
  std::vector<ops::Routing> routings;
  std::vector<Tensor> drouter_logits;
  if (stash_.aux_scale != 0) {
    for (const Layer& layer : layers_)
      if (layer.moe) {
        routings.push_back(layer.moe->routing());
        drouter_logits.push_back(Tensor::zeros(layer.moe->routing().logits.shape(), DType::F32));
      }
    ops::load_balancing_loss_backward(routings, stash_.layout.token_valid, stash_.aux_scale, drouter_logits);
  }
  size_t moe_index = routings.size();
  for (auto layer = layers_.rbegin(); layer != layers_.rend(); ++layer) {
    if (layer->moe) {
      const Tensor extra = drouter_logits.empty() ? Tensor() : drouter_logits[--moe_index];
      dh = layer->moe->backward(dh, extra);
      layer->moe->clear_stash();
    } else {
      dh = layer->dense->backward(dh);
      layer->dense->clear_stash();
    }
    dh = layer->attention.backward(dh, stash_.layout);
    layer->attention.clear_stash();
  }
  ops::embedding_backward(dh, stash_.input_ids.view({-1}), store_->get("embed_tokens").grad);
  stash_ = {};
}

void CausalLM::save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options) const {
  io::save_checkpoint(store_->weights(), folder, options);
}

std::vector<std::pair<std::string, size_t>> CausalLM::stash_report() const {
  std::vector<std::pair<std::string, size_t>> report;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    report.emplace_back(fmt::format("layers.{}.attention", i), layer.attention.stash_bytes());
    if (layer.moe)
      report.emplace_back(fmt::format("layers.{}.moe", i), layer.moe->stash_bytes());
    else
      report.emplace_back(fmt::format("layers.{}.mlp", i), layer.dense->stash_bytes());
  }
  report.emplace_back("head", held_bytes({&stash_.final_hidden, &stash_.logits}));
  return report;
}

std::vector<std::pair<int64_t, ops::RouterStats>> CausalLM::router_stats() const {
  std::vector<std::pair<int64_t, ops::RouterStats>> stats;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].moe && layers_[i].moe->routing().logits.defined())
      stats.emplace_back(int64_t(i), ops::router_stats(layers_[i].moe->routing(), stash_.layout.token_valid));
  return stats;
}

size_t CausalLM::stash_bytes() const {
  size_t total = 0;
  for (const auto& [block, bytes] : stash_report()) total += bytes;
  return total;
}

}  // namespace moetune::model
