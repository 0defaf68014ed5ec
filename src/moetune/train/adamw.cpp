#include "moetune/train/adamw.h"

#include <algorithm>
#include <cmath>

#include "moetune/core/flat_buffers.h"
#include "moetune/ops/adamw_math.h"
#include "moetune/ops/blockwise_quant.h"

namespace moetune::train {
namespace {

// One parameter's update with 8-bit moments, block by block: the block's moments dequantized, updated in fp32
// with the parameter, and quantized again against the block's new absmax (bitsandbytes' blockwise 8-bit step).
void step_int8(float* p, const float* g, int64_t numel, uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
               float* v_absmax, const ops::AdamWConstants& c) {
  static const std::vector<float> signed_midpoints = ops::code_midpoints(ops::dynamic_map_signed().data(), 256);
  static const std::vector<float> unsigned_midpoints = ops::code_midpoints(ops::dynamic_map_unsigned().data(), 256);
  constexpr int64_t kBlock = ops::kAdamWStateBlock;
  float m[kBlock], v[kBlock];
  for (int64_t first = 0, block = 0; first < numel; first += kBlock, ++block) {
    const int64_t size = std::min(kBlock, numel - first);
    ops::dequantize_blocks(m_codes + first, m_absmax + block, size, kBlock, ops::dynamic_map_signed().data(), m);
    ops::dequantize_blocks(v_codes + first, v_absmax + block, size, kBlock, ops::dynamic_map_unsigned().data(), v);
    for (int64_t i = 0; i < size; ++i) ops::adamw_element(p[first + i], g[first + i], m[i], v[i], c);
    m_absmax[block] = ops::quantize_block(m, size, size == kBlock, signed_midpoints, m_codes + first);
    v_absmax[block] = ops::quantize_block(v, size, size == kBlock, unsigned_midpoints, v_codes + first, /*nonzero=*/true);
  }
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> parameters, std::vector<Tensor> gradients, AdamWOptions options)
    : parameters_(std::move(parameters)), gradients_(std::move(gradients)), options_(options) {
  MOETUNE_CHECK(parameters_.size() == gradients_.size(), "AdamW: {} parameters but {} gradients", parameters_.size(),
                gradients_.size());
  // The moments live in flat buffers; a parameter without a gradient (frozen) gets none.
  const DType moment_dtype = options_.int8_state ? DType::U8 : DType::F32;
  std::vector<FlatRequest> moments, absmax;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    MOETUNE_CHECK(parameters_[i].dtype() == DType::F32 &&
                      (!gradients_[i].defined() || gradients_[i].shape() == parameters_[i].shape()),
                  "AdamW: parameter {} with gradient {}", parameters_[i].str(), gradients_[i].str());
    const bool trained = gradients_[i].defined();
    moments.push_back({parameters_[i].shape(), moment_dtype, trained});
    absmax.push_back({{ops::adamw_state_blocks(parameters_[i].numel())}, DType::F32, trained && options_.int8_state});
  }
  // Zero codes with zero absmax values dequantize to zero moments.
  m_ = allocate_flat(moments, Device::cpu(), /*zeroed=*/true).views;
  v_ = allocate_flat(moments, Device::cpu(), /*zeroed=*/true).views;
  m_absmax_ = allocate_flat(absmax, Device::cpu(), /*zeroed=*/true).views;
  v_absmax_ = allocate_flat(absmax, Device::cpu(), /*zeroed=*/true).views;
}

std::vector<std::pair<std::string, std::vector<Tensor>>> AdamW::named_state() const {
  std::vector<std::pair<std::string, std::vector<Tensor>>> state = {{"adam_m", m_}, {"adam_v", v_}};
  if (options_.int8_state) {
    state.emplace_back("adam_m_absmax", m_absmax_);
    state.emplace_back("adam_v_absmax", v_absmax_);
  }
  return state;
}

void AdamW::restore(const std::vector<std::vector<Tensor>>& state, int64_t steps_taken) {
  const auto targets = named_state();
  MOETUNE_CHECK(state.size() == targets.size(), "AdamW state of {} lists, expected {}", state.size(), targets.size());
  for (size_t k = 0; k < targets.size(); ++k) {
    const std::vector<Tensor>& into = targets[k].second;
    MOETUNE_CHECK(state[k].size() == into.size(), "AdamW state '{}' holds {} tensors for {} parameters",
                  targets[k].first, state[k].size(), into.size());
    for (size_t i = 0; i < into.size(); ++i)
      if (into[i].defined()) Tensor(into[i]).copy_from(state[k][i]);  // views: copying into one writes the buffer
  }
  steps_ = steps_taken;
}

void AdamW::step(double lr) {
  ++steps_;
  const ops::AdamWConstants c =
      ops::adamw_constants(lr, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, steps_);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!gradients_[i].defined()) continue;  // frozen
    float* p = parameters_[i].data<float>();
    const float* g = gradients_[i].data<float>();
    const int64_t numel = parameters_[i].numel();
    if (options_.int8_state) {
      step_int8(p, g, numel, m_[i].data<uint8_t>(), m_absmax_[i].data<float>(), v_[i].data<uint8_t>(),
                v_absmax_[i].data<float>(), c);
      continue;
    }
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    for (int64_t j = 0; j < numel; ++j) ops::adamw_element(p[j], g[j], m[j], v[j], c);
  }
}

}  // namespace moetune::train
