#include "moetune/model/cuda/causal_lm.h"

#include <algorithm>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/half.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#include "moetune/model/router_bias_balance.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/embedding.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/linear_cross_entropy.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }

float read_scalar(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  return host.data<float>()[0];
}
}  // namespace

void CausalLM::zero_grad() {
  const auto same = [](const Tensor& a, const Tensor& b) {
    return b.defined() && a.raw_data() == b.raw_data() && a.nbytes() == b.nbytes();
  };
  const auto overwritten = [&](const Tensor& grad) {
    return std::any_of(overwritten_gradients_.begin(), overwritten_gradients_.end(),
                       [&](const Tensor& o) { return same(grad, o); });
  };
  // In each replicated run, the gradients nothing writes whole are zeroed, neighbours in one memset (with the
  // alignment padding between them: never written, it stays zero either way).
  for (const Tensor& run : store_->replicated_grad_runs()) {
    const char* const run_begin = static_cast<const char*>(run.raw_data());
    const char* const run_end = run_begin + run.nbytes();
    std::vector<std::pair<char*, bool>> grads;  // (start, zeroed) of each gradient in the run, then by address
    std::vector<char*> ends;
    for (const Tensor& grad : store_->grads()) {
      char* begin = grad.defined() ? static_cast<char*>(grad.raw_data()) : nullptr;
      if (begin < run_begin || begin >= run_end) continue;
      const bool left_alone = overwritten(grad) || same(grad, kept_gradient_) || same(grad, written_head_gradient_);
      grads.emplace_back(begin, !left_alone);
      ends.push_back(begin + grad.nbytes());
    }
    std::vector<size_t> order(grads.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return grads[a].first < grads[b].first; });
    for (size_t i = 0; i < order.size();) {
      if (!grads[order[i]].second) {
        ++i;
        continue;
      }
      char* const begin = grads[order[i]].first;
      char* end = ends[order[i]];
      for (++i; i < order.size() && grads[order[i]].second; ++i) end = std::max(end, ends[order[i]]);
      zero_bytes(begin, run.device(), size_t(end - begin));
    }
  }
  store_->zero_layer_arena();
  for (const Tensor& run : store_->expert_grad_runs()) {
    const char* begin = static_cast<const char*>(run.raw_data());
    const char* end = begin + run.nbytes();
    const bool kept = std::all_of(store_->grads().begin(), store_->grads().end(), [&](const Tensor& grad) {
      if (!grad.defined()) return true;
      const char* at = static_cast<const char*>(grad.raw_data());
      return at < begin || at >= end || overwritten(grad);
    });
    if (!kept) zero_bytes(run.raw_data(), run.device(), run.nbytes());
  }
  next_backward_overwrites_ = true;
}

CausalLM CausalLM::from_pretrained(const std::filesystem::path& folder) {
  require_gpu_support(load_model_spec(folder / "config.json"));  // before the weights go to the GPU
  return CausalLM(load_checkpoint(folder, LoadOptions{DType::BF16, Device::cuda()}), {}, GradientStorage::Flat);
}

CausalLM::CausalLM(ModelWeights weights, const DispatcherFactory<GpuBlocks>& make_dispatcher, GradientStorage gradients)
    : store_((require_gpu_support(weights.spec()), std::make_unique<ParameterStore>(std::move(weights), gradients))) {
  const ModelSpec& s = spec();
  require_gpu_support(s);
  sublayers_ = build_sublayers<GpuBlocks>(s, *store_, make_dispatcher);
  store_->require_lora_adapters_looked_up();
  embed_ = store_->get("embed_tokens");
  head_ = store_->get(s.tie_word_embeddings ? "embed_tokens" : "lm_head");
  final_norm_ = store_->get("final_norm");
  embedding_scale_ = float(s.embedding_scale);
  if (s.embedding_scale_in_activation_dtype) embedding_scale_ = bf16_to_f32(f32_to_bf16(embedding_scale_));
  for (const auto& sublayer : sublayers_)
    for (const Tensor& grad : sublayer.with_block([](const auto& block) { return block.overwritten_gradients(); }))
      overwritten_gradients_.push_back(grad);
  set_head_gradient_written(true);
  keep_outputs_ = keeps_outputs(Recompute::None, store_->weights().lora != nullptr);
}

void CausalLM::divide_logits(const Tensor& logits) const {
  if (spec().logits_divisor != 1.0) ops::cuda::scale(logits, logit_scale(), logits);
}

void CausalLM::set_head_gradient_written(bool on) {
  // Between zero_grad() and the step's first backward pass the gradient holds the last step's: a pass that adds
  // needs it zeroed.
  if (!on && written_head_gradient_.defined() && next_backward_overwrites_)
    zero_bytes(written_head_gradient_.raw_data(), written_head_gradient_.device(), written_head_gradient_.nbytes());
  written_head_gradient_ = on && !spec().tie_word_embeddings ? head_.grad : Tensor();
}

void CausalLM::set_recompute(Recompute mode, int64_t keep_last_layers) {
  const int64_t layers = spec().num_layers();
  for (int64_t i = 0, s = 0; i < layers; ++i)
    for (const SublayerSpec& sublayer : spec().layers[size_t(i)].sublayers)
      sublayers_[size_t(s++)].recompute = recomputes(mode, sublayer, i, layers, keep_last_layers);
  keep_outputs_ = keeps_outputs(mode, store_->weights().lora != nullptr);
}

bool CausalLM::wants_aux(const Batch& batch) const {
  return spec().aux_loss == AuxLoss::LoadBalancing && batch.output_router_logits.value_or(spec().aux_loss_by_default);
}

CausalLM::Forward CausalLM::run_layers(StepContext& context, bool with_aux) {
  const ModelSpec& c = spec();
  const DeviceBatch& batch = context.batch;
  if (with_aux) {
    const int64_t experts = c.num_experts();
    context.aux = {Tensor::zeros({experts}, DType::F32, Device::cuda()), Tensor::zeros({experts}, DType::F32, Device::cuda())};
    context.aux_rows = double(batch.valid_tokens * c.moe_layer_count());
  }
  Tensor h = device_like({batch.tokens, c.hidden_size});
  if (parameters_needed_) parameters_needed_(-1);
  if (embedding_lookup_) embedding_lookup_(batch.ids);
  ops::cuda::embedding_forward(batch.ids, embed_.value, h, embedding_scale_);
  Forward f;
  f.final_hidden = h = walk_forward(sublayers_, h, context, parameters_needed_);
  if (parameters_needed_) parameters_needed_(c.num_layers());
  f.normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, final_norm_.value, c.norm_eps, f.normed, c.final_norm_weight_offset);
  return f;
}

void CausalLM::clear_stashes() {
  for (auto& b : sublayers_) b.clear_stash();
}

CausalLMOutput CausalLM::forward_backward(const Batch& batch) {
  const QueuedLosses queued = queue_forward_backward(batch);
  return queued.read(read_scalar(queued.loss_sum), queued.aux_loss.defined() ? read_scalar(queued.aux_loss) : NAN);
}

CausalLMOutput CausalLM::QueuedLosses::read(float loss_sum_value, float aux_value) const {
  CausalLMOutput out;
  out.num_tokens = num_tokens;
  out.lm_loss = double(loss_sum_value) * lm_scale;
  out.loss = out.lm_loss;
  if (aux_loss.defined()) {
    out.aux_loss = aux_value;
    out.loss += aux_scale * out.aux_loss;
  }
  return out;
}

CausalLM::QueuedLosses CausalLM::queue_forward_backward(const Batch& batch) {
  const ModelSpec& c = spec();
  MOETUNE_CHECK(batch.labels.defined(), "forward_backward needs labels");
  const DeviceBatch device_batch = upload_batch(c, batch);
  const bool with_aux = wants_aux(batch);
  StepContext context{device_batch};
  context.training = true;
  context.lora_draw = lora_draw_++;
  context.keep_outputs = keep_outputs_;
  context.overwrite_gradients = next_backward_overwrites_;
  context.expert_norms = expert_norms_;
  next_backward_overwrites_ = false;
  Forward f;
  {
    const PhaseScope phase("layers");
    f = run_layers(context, with_aux);
  }
  stash_report_.clear();
  for (const auto& b : sublayers_)
    stash_report_.emplace_back(b.name, b.stash_bytes());

  const double divisor = batch.num_items_in_batch.value_or(double(device_batch.scored));
  const double lm_scale = divisor > 0 ? 1.0 / divisor : 0.0;
  PhaseScope phase("lm_head+loss");
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, Device::cuda());
  Tensor dnormed = device_like(f.normed.shape());
  // The step's first pass writes the untied head's gradient whole: zero_grad() left it alone.
  const bool write_head_gradient = context.overwrite_gradients && written_head_gradient_.defined();
  ops::cuda::linear_cross_entropy(f.normed, head_.value, device_batch.targets, lm_scale, loss_sum, dnormed, head_.grad,
                                  lm_head_chunk_rows_, write_head_gradient, logit_scale());
  f.normed = Tensor();
  Tensor aux_loss;
  if (with_aux) {
    aux_loss = Tensor::zeros({1}, DType::F32, Device::cuda());
    ops::cuda::aux_loss_value(context.aux.counts, context.aux.prob_sums, context.aux_rows, aux_loss);
  }
  context.aux_scale = with_aux ? c.aux_loss_coef : 0.0;

  Tensor dh = device_like(f.final_hidden.shape());
  ops::cuda::rms_norm_backward(dnormed, f.final_hidden, final_norm_.value, c.norm_eps, dh, final_norm_.grad, {},
                               c.final_norm_weight_offset);
  dnormed = f.final_hidden = Tensor();
  if (gradients_done_) gradients_done_(c.num_layers());
  phase.next("layers.bwd");
  dh = walk_backward(sublayers_, dh, context, gradients_done_, layer_backward_);
  phase.next("embedding.bwd");
  if (embed_.grad.defined())  // undefined: frozen
    ops::cuda::embedding_backward(dh, device_batch.ids, embed_.grad, c.embedding_padding_idx.value_or(-1),
                                  embedding_scale_);
  if (gradients_done_) gradients_done_(-1);
  phase.end();

  return {loss_sum, lm_scale, aux_loss, context.aux_scale, device_batch.scored};
}

CausalLMOutput CausalLM::loss(const Batch& batch) {
  const ModelSpec& c = spec();
  MOETUNE_CHECK(batch.labels.defined(), "loss needs labels");
  const DeviceBatch device_batch = upload_batch(c, batch);
  const bool with_aux = wants_aux(batch);
  StepContext context{device_batch};
  Forward f = run_layers(context, with_aux);
  clear_stashes();
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, Device::cuda());
  ops::cuda::linear_cross_entropy(f.normed, head_.value, device_batch.targets, 1.0, loss_sum, {}, {},
                                  lm_head_chunk_rows_, false, logit_scale());
  CausalLMOutput out;
  out.num_tokens = device_batch.scored;
  const double divisor = batch.num_items_in_batch.value_or(double(device_batch.scored));
  out.lm_loss = divisor > 0 ? double(read_scalar(loss_sum)) / divisor : 0.0;
  out.loss = out.lm_loss;
  if (with_aux) {
    Tensor aux_loss = Tensor::zeros({1}, DType::F32, Device::cuda());
    ops::cuda::aux_loss_value(context.aux.counts, context.aux.prob_sums, context.aux_rows, aux_loss);
    out.aux_loss = read_scalar(aux_loss);
    out.loss += c.aux_loss_coef * out.aux_loss;
  }
  return out;
}

Tensor CausalLM::logits(const Batch& batch) {
  const ModelSpec& c = spec();
  const DeviceBatch device_batch = upload_batch(c, batch);
  StepContext context{device_batch};
  Forward f = run_layers(context, /*with_aux=*/false);
  clear_stashes();
  Tensor logits = device_like({device_batch.tokens, c.vocab_size});
  ops::cuda::linear_forward(f.normed, head_.value, {}, logits);
  divide_logits(logits);
  return ops::cast(logits.to(Device::cpu()), DType::F32).view({device_batch.rows, device_batch.seq, c.vocab_size});
}

std::vector<std::vector<int32_t>> CausalLM::routing_choices(const Batch& batch) {
  const DeviceBatch device_batch = upload_batch(spec(), batch);
  StepContext context{device_batch};
  run_layers(context, /*with_aux=*/false);
  std::vector<std::vector<int32_t>> choices;
  for (const auto& b : sublayers_) {
    if (!b.moe) continue;
    const Tensor ids = b.moe->expert_ids().to(Device::cpu());
    choices.emplace_back(ids.data<int32_t>(), ids.data<int32_t>() + ids.numel());
  }
  clear_stashes();
  return choices;
}

void CausalLM::save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options) const {
  save_checkpoint(store_->weights(), folder, options);
}

std::vector<std::pair<int64_t, Tensor>> CausalLM::router_counts() const {
  std::vector<std::pair<int64_t, Tensor>> counts;
  for (const auto& b : sublayers_)
    if (b.moe && b.moe->layer_counts().defined()) counts.emplace_back(b.layer, b.moe->layer_counts());
  return counts;
}

ops::RouterStats router_stats_of_counts(const float* counts, int64_t experts) {
  double total = 0, most = 0, least = INFINITY;
  for (int64_t e = 0; e < experts; ++e) {
    total += counts[e];
    most = std::max(most, double(counts[e]));
    least = std::min(least, double(counts[e]));
  }
  const double mean = total / double(experts);
  ops::RouterStats s;
  s.load_max_over_mean = mean > 0 ? most / mean : 0;
  s.load_min_over_mean = mean > 0 ? least / mean : 0;
  s.entropy = NAN;  // needs the probabilities; not computed on the GPU path
  return s;
}

std::vector<std::pair<int64_t, ops::RouterStats>> CausalLM::router_stats() const {
  std::vector<std::pair<int64_t, ops::RouterStats>> stats;
  for (const auto& [layer, device_counts] : router_counts()) {
    const Tensor counts = device_counts.to(Device::cpu());
    stats.emplace_back(layer, router_stats_of_counts(counts.data<float>(), counts.numel()));
  }
  return stats;
}

void CausalLM::add_expert_load(std::vector<std::vector<double>>& load) const {
  size_t moe_index = 0;
  for (const auto& b : sublayers_) {
    if (!b.moe || !b.moe->layer_counts().defined()) continue;
    const Tensor counts = b.moe->layer_counts().to(Device::cpu());  // valid tokens only
    if (load.size() <= moe_index) load.resize(moe_index + 1);
    std::vector<double>& layer = load[moe_index++];
    if (layer.empty()) layer.assign(size_t(counts.numel()), 0.0);
    for (int64_t e = 0; e < counts.numel(); ++e) layer[size_t(e)] += counts.data<float>()[e];
  }
}

void CausalLM::check_router_correction_biases() const {
  for (const auto& b : sublayers_)
    if (b.moe && !store_->find(fmt::format("layers.{}.moe.router_correction_bias", b.layer)).defined())
      fail("training.router_bias_update_rate: layer {} of this {} has no router correction bias to move", b.layer,
           spec().architecture);
}

void CausalLM::update_router_bias(double rate, const std::vector<std::vector<double>>& load) {
  check_router_correction_biases();
  size_t moe_index = 0;
  for (const auto& b : sublayers_) {
    if (!b.moe) continue;
    if (moe_index < load.size()) {
      Param bias = store_->get(fmt::format("layers.{}.moe.router_correction_bias", b.layer));
      const Tensor host = bias.value.to(Device::cpu());
      balance_correction_bias(host, load[moe_index], rate);
      bias.value.copy_from(host);
    }
    ++moe_index;
  }
}

}  // namespace moetune::model::cuda
