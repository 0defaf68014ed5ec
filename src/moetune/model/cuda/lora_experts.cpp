#include "moetune/model/cuda/lora_experts.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_config.h"
#include "moetune/ops/cuda/lora.h"

namespace moetune::model::cuda {

ExpertLora ExpertLora::lookup(const ParameterStore& store, const std::string& layer) {
  ExpertLora lora;
  lora.p_ = ExpertLoraParams::lookup(store, layer);
  if (lora.empty()) return lora;
  const int64_t rank = store.weights().lora->rank;
  // The grouped GEMMs move 16-byte rows (ops/cuda/grouped_gemm.h) and the rank is their N or K.
  if (rank % 8 != 0)
    fail("{}: LoRA on the experts runs on the GPU with lora.rank a multiple of 8 (it is {}); choose 8, 16, 32, ... "
         "or train on the CPU (training.device cpu)",
         layer + "moe", rank);
  // lora_config refuses dropout with target_parameters, as PEFT does (its ParamWrapper has no dropout on the
  // experts' input), so the expert adapters never see it.
  MOETUNE_CHECK(store.weights().lora->dropout == 0, "{}: LoRA dropout on the experts (PEFT refuses it too)", layer);
  return lora;
}

void ExpertLora::gate_up_forward(const Tensor& rows, const Tensor& offsets, const Tensor& pre) {
  if (on_gate_up()) gate_up_u_ = ops::cuda::lora_grouped_forward(rows, offsets, p_.gate_up_a.value, p_.gate_up_b.value, p_.scale, pre);
}

void ExpertLora::down_forward(const Tensor& activated, const Tensor& offsets, const Tensor& out) {
  if (on_down()) down_u_ = ops::cuda::lora_grouped_forward(activated, offsets, p_.down_a.value, p_.down_b.value, p_.scale, out);
}

void ExpertLora::gate_up_backward(const Tensor& dpre, const Tensor& rows, const Tensor& offsets, const Tensor& drows) {
  if (!on_gate_up()) return;
  ops::cuda::lora_grouped_backward(dpre, rows, gate_up_u_, offsets, p_.gate_up_a.value, p_.gate_up_b.value, p_.scale,
                                   p_.gate_up_a.grad, p_.gate_up_b.grad, drows);
  gate_up_u_ = Tensor();
}

void ExpertLora::down_backward(const Tensor& dout, const Tensor& activated, const Tensor& offsets, const Tensor& dactivated) {
  if (!on_down()) return;
  ops::cuda::lora_grouped_backward(dout, activated, down_u_, offsets, p_.down_a.value, p_.down_b.value, p_.scale,
                                   p_.down_a.grad, p_.down_b.grad, dactivated);
  down_u_ = Tensor();
}

size_t ExpertLora::stash_bytes() const { return held_bytes({&gate_up_u_, &down_u_}); }

}  // namespace moetune::model::cuda
