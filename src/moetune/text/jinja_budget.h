// What one render may spend. Python renders `{{ 1 ** 10**18 }}` at once but nested range(99999) loops, a list
// rebuilt on every iteration or a value nested 100,000 deep never finish, or overflow the stack; a chat template
// does a few thousand steps. Every step and every value built is charged, and the render stops with an error
// naming the limit once it is spent.
#pragma once

#include <cstdint>

#include "moetune/text/jinja_value.h"

namespace moetune::text::jinja {

// Far above what chat templates need, and reached within seconds.
inline constexpr int64_t kMaxRenderWork = 20'000'000;
inline constexpr int64_t kMaxRenderOutputBytes = int64_t(64) << 20;
inline constexpr int kMaxValueDepth = 1000;  // as for JSON (io/json_file.h)
// A value doubled in a loop would otherwise take gigabytes before the step budget ran out.
inline constexpr int64_t kMaxValueBytes = kMaxRenderOutputBytes;
inline constexpr int64_t kMaxValueNodes = int64_t(1) << 20;

class RenderBudget {
 public:
  explicit RenderBudget(int64_t max_work = kMaxRenderWork) : max_work_(max_work) {}
  // One step: a statement, an expression.
  void step() { spend(1); }
  // A value just built: its characters (a 64th each) or, for a list or dict, every node under it, counted
  // without recursion; a value deeper than kMaxValueDepth, longer than kMaxValueBytes or with more than
  // kMaxValueNodes nodes is an Error.
  void built(const Value& value);
  // The output so far.
  void wrote(const std::string& out) const;

 private:
  void spend(int64_t units);
  int64_t max_work_;
  int64_t spent_ = 0;
};

}  // namespace moetune::text::jinja
