#include "moetune/train/update_in_backward_setting.h"

#include <fmt/format.h>

#include "moetune/core/error.h"

namespace moetune::train {

bool updates_in_backward(const Recipe& r, int world) {
  const std::string& setting = r.optimizer.update_in_backward;
  std::string blocker;
  if (r.optimizer.max_grad_norm > 0)
    blocker = fmt::format("clipping needs every gradient first (optimizer.max_grad_norm is {}; 0 turns clipping off)",
                          r.optimizer.max_grad_norm);
  else if (r.training.gradient_accumulation_steps > 1)
    blocker = fmt::format("gradient accumulation adds later micro-batches' gradients (training.gradient_accumulation_steps is {})",
                          r.training.gradient_accumulation_steps);
  else if (world > 1)
    blocker = fmt::format("it runs on one rank so far ({} ranks here)", world);
  if (setting == "on" && !blocker.empty()) fail("optimizer.update_in_backward on: {}", blocker);
  return setting != "off" && blocker.empty();
}

}  // namespace moetune::train
