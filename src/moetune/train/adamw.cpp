#include "moetune/train/adamw.h"

#include <cmath>

#include "moetune/core/flat_buffers.h"

namespace moetune::train {

AdamW::AdamW(std::vector<Tensor> parameters, std::vector<Tensor> gradients, AdamWOptions options)
    : parameters_(std::move(parameters)), gradients_(std::move(gradients)), options_(options) {
  MOETUNE_CHECK(parameters_.size() == gradients_.size(), "AdamW: {} parameters but {} gradients", parameters_.size(),
                gradients_.size());
  // The moments live in two flat buffers; a parameter without a gradient (frozen) gets none.
  std::vector<FlatRequest> requests;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    MOETUNE_CHECK(parameters_[i].dtype() == DType::F32 &&
                      (!gradients_[i].defined() || gradients_[i].shape() == parameters_[i].shape()),
                  "AdamW: parameter {} with gradient {}", parameters_[i].str(), gradients_[i].str());
    requests.push_back({parameters_[i].shape(), DType::F32, gradients_[i].defined()});
  }
  m_ = allocate_flat(requests, Device::cpu(), /*zeroed=*/true).views;
  v_ = allocate_flat(requests, Device::cpu(), /*zeroed=*/true).views;
}

void AdamW::restore(const std::vector<Tensor>& first_moments, const std::vector<Tensor>& second_moments,
                    int64_t steps_taken) {
  MOETUNE_CHECK(first_moments.size() == m_.size() && second_moments.size() == v_.size(),
                "AdamW state holds {} moments for {} parameters", first_moments.size(), m_.size());
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    m_[i].copy_from(first_moments[i]);
    v_[i].copy_from(second_moments[i]);
  }
  steps_ = steps_taken;
}

void AdamW::step(double lr) {
  ++steps_;
  const float beta1 = float(options_.beta1), beta2 = float(options_.beta2);
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, double(steps_));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, double(steps_));
  const float step_size = float(lr / bias_correction1);
  const float decay = float(1.0 - lr * options_.weight_decay);
  const float sqrt_correction2 = float(std::sqrt(bias_correction2));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!gradients_[i].defined()) continue;  // frozen
    float* p = parameters_[i].data<float>();
    const float* g = gradients_[i].data<float>();
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    for (int64_t j = 0; j < parameters_[i].numel(); ++j) {
      p[j] *= decay;  // decoupled weight decay, before the moment update as torch does
      m[j] += (g[j] - m[j]) * (1.0f - beta1);
      v[j] = beta2 * v[j] + (1.0f - beta2) * g[j] * g[j];
      p[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_correction2 + float(options_.eps));
    }
  }
}

}  // namespace moetune::train
