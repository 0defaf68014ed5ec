// The C++ API, named as transformers and torch name the same things:
//
//   auto model = moetune::AutoModelForCausalLM::from_pretrained("Qwen3-30B-A3B");
//   moetune::AdamW optimizer(model.parameters().values(), model.parameters().grads(), {.lr = 1e-5});
//   auto out = model.forward({.input_ids = ids, .labels = ids});   // out.logits, out.loss, out.aux_loss
//   model.backward();
//   optimizer.step();
//   model.zero_grad();
//   model.save_pretrained("out");
//
// The same model on either device, through one interface (the GPU one trains in bf16):
//
//   auto model = moetune::load_language_model("Qwen3-30B-A3B", "auto");   // "cpu", "cuda" or "auto"
//   auto out = model->forward_backward({.input_ids = ids, .labels = ids});
//   moetune::Tensor logits = model->logits({.input_ids = ids});
#pragma once

#include "moetune/model/causal_lm.h"
#include "moetune/model/language_model.h"
#include "moetune/train/adamw.h"
#include "moetune/train/grad_clip.h"
#include "moetune/train/lr_schedule.h"

namespace moetune {

using AutoModelForCausalLM = model::CausalLM;
using Batch = model::Batch;
using CausalLMOutput = model::CausalLMOutput;
using LanguageModel = model::LanguageModel;
using model::load_language_model;
using AdamW = train::AdamW;
using AdamWOptions = train::AdamWOptions;
using LrSchedule = train::LrSchedule;

}  // namespace moetune
