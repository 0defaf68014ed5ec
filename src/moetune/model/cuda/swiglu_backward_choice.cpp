#include "moetune/model/cuda/swiglu_backward_choice.h"

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "moetune/core/error.h"

namespace moetune::model::cuda {
namespace {

std::optional<bool> from_environment() {
  const char* value = std::getenv("MOETUNE_SWIGLU_BACKWARD");
  if (value == nullptr || std::string_view(value) == "kernel") return false;
  if (std::string_view(value) == "epilogue") return true;
  return std::nullopt;
}

const std::optional<bool> g_initial = from_environment();
std::atomic<int> g_choice{g_initial ? int(*g_initial) : -1};  // -1: the environment's value is invalid

}  // namespace

bool swiglu_backward_in_epilogue() {
  const int choice = g_choice.load(std::memory_order_relaxed);
  MOETUNE_CHECK(choice >= 0, "MOETUNE_SWIGLU_BACKWARD='{}' is neither kernel nor epilogue",
                std::getenv("MOETUNE_SWIGLU_BACKWARD"));
  return choice == 1;
}

void set_swiglu_backward_in_epilogue(bool in_epilogue) { g_choice.store(int(in_epilogue), std::memory_order_relaxed); }

}  // namespace moetune::model::cuda
