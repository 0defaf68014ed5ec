// The GPU CausalLM's generation entry points (language_model.h): the prompt (or any run of new tokens) through
// the usual forward pass with the blocks reading and extending the KV cache, then the LM head on the last row.
#include <numeric>

#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/model/device_support.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gemm.h"

namespace moetune::model::cuda {
namespace {
// Prompts are flash attention over one document whose length bound is part of the cuDNN graph's key: rounding
// it up lets prompts of similar length (each chat turn's) share a graph instead of building one each.
constexpr int64_t kPromptLengthGranularity = 256;
}  // namespace

std::unique_ptr<DecodeCache> CausalLM::new_decode_cache(int64_t max_tokens) {
  MOETUNE_CHECK(max_tokens > 0, "new_decode_cache: {} tokens", max_tokens);
  require_gpu_generation_support(spec());  // the decode path implements less than the forward pass
  return std::make_unique<KvCache>(max_tokens);
}

Tensor CausalLM::next_token_logits(const std::vector<int64_t>& ids, DecodeCache& decode_cache) {
  MOETUNE_CHECK(!ids.empty(), "next_token_logits: no new tokens");
  auto* cache = dynamic_cast<KvCache*>(&decode_cache);
  MOETUNE_CHECK(cache, "next_token_logits: the cache was made by another device's model");
  const ModelSpec& c = spec();
  const int64_t count = int64_t(ids.size());
  std::vector<int64_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), cache->tokens());
  Batch batch;
  batch.input_ids = Tensor::from_vector(ids, {1, count});
  batch.position_ids = Tensor::from_vector(positions, {1, count});
  DeviceBatch device_batch = upload_batch(c, batch);
  if (cache->tokens() == 0) {
    const int64_t bound = (count + kPromptLengthGranularity - 1) / kPromptLengthGranularity * kPromptLengthGranularity;
    device_batch.documents = ops::cuda::pack_documents(std::vector<int64_t>(ids.size(), 0), bound);
  }
  StepContext context{device_batch};
  context.kv_cache = cache;
  cache->start_pass(count);
  const Forward f = run_layers(context, /*with_aux=*/false);
  cache->finish_pass();
  clear_stashes();
  Tensor logits = Tensor::empty({1, c.vocab_size}, DType::BF16, Device::cuda());
  ops::cuda::linear_forward(f.normed.narrow(count - 1, 1), head_.value, {}, logits);
  divide_logits(logits);
  return ops::cast(logits.to(Device::cpu()), DType::F32).view({-1});
}

}  // namespace moetune::model::cuda
