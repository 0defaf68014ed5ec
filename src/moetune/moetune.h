// The C++ API, named as transformers and torch name the same things:
//
//   auto model = moetune::AutoModelForCausalLM::from_pretrained("Qwen3-30B-A3B");
//   moetune::AdamW optimizer(model.parameters().values(), model.parameters().grads(), {.lr = 1e-5});
//   auto out = model.forward({.input_ids = ids, .labels = ids});   // out.logits, out.loss, out.aux_loss
//   model.backward();
//   optimizer.step();
//   model.zero_grad();
//   model.save_pretrained("out");
#pragma once

#include "moetune/model/causal_lm.h"
#include "moetune/train/adamw.h"
#include "moetune/train/grad_clip.h"
#include "moetune/train/lr_schedule.h"

namespace moetune {

using AutoModelForCausalLM = model::CausalLM;
using Batch = model::Batch;
using CausalLMOutput = model::CausalLMOutput;
using AdamW = train::AdamW;
using AdamWOptions = train::AdamWOptions;
using LrSchedule = train::LrSchedule;

}  // namespace moetune
