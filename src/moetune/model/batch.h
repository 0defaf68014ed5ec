// What a model step takes and gives back, on either device.
#pragma once

#include <cmath>
#include <optional>

#include "moetune/core/tensor.h"

namespace moetune::model {

struct Batch {
  Tensor input_ids;                            // [B, S] I64
  Tensor labels;                               // [B, S] I64, -100 where not scored; undefined: no loss
  Tensor attention_mask;                       // [B, S] I64, 0 for padding; undefined: none
  Tensor position_ids;                         // [B, S] I64, restarting per packed document; undefined: 0..S-1
  std::optional<double> num_items_in_batch;    // CE = sum / this (gradient accumulation) instead of the mean
  std::optional<bool> output_router_logits;    // add the MoE aux loss; default: config.json's setting
};

struct CausalLMOutput {
  Tensor logits;             // [B, S, V] fp32
  double loss = NAN;         // lm_loss + router_aux_loss_coef · aux_loss; NaN without labels
  double lm_loss = NAN;      // the cross-entropy part
  double aux_loss = NAN;     // the load-balancing loss; NaN when not computed
  int64_t num_tokens = 0;    // tokens the cross-entropy counted
};

}  // namespace moetune::model
