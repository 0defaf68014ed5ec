#include "moetune/model/parameter_layout.h"

namespace moetune::model {
int64_t ParameterLayout::total_parameters() const {
  int64_t total = 0;
  for (const auto& p : parameters)
    if (p.role != ParameterRole::Buffer || p.counted_buffer) total += shape_numel(p.shape);
  return total;
}

int64_t ParameterLayout::active_parameters() const {
  int64_t active = 0;
  for (const auto& p : parameters) active += p.active_numel;
  return active;
}

int64_t ParameterLayout::active_matmul_parameters() const {
  int64_t active = 0;
  for (const auto& p : parameters) {
    bool matmul = p.role == ParameterRole::Matmul || p.role == ParameterRole::Router ||
                  p.role == ParameterRole::Experts || p.role == ParameterRole::LmHead ||
                  (p.role == ParameterRole::Embedding && spec.tie_word_embeddings);  // it is the LM head too
    if (matmul) active += p.active_numel;
  }
  return active;
}

}  // namespace moetune::model
