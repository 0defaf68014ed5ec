// Issue 16, items 3 and 9: chat templates that nest too deeply or never end are clean errors, not a crash or a
// hang; what Python renders at once (1 ** 10**18, '' * 10**18) renders at once here too.
#include <gtest/gtest.h>

#include <chrono>

#include "moetune/core/error.h"
#include "moetune/text/jinja_template.h"

namespace moetune::text::jinja {
namespace {

std::string repeat(const std::string& piece, size_t times) {
  std::string out;
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

// A small part of the real budget keeps the runaway cases quick under the sanitizers.
constexpr int64_t kTestWork = kMaxRenderWork / 200;

std::string render(const std::string& source, int64_t max_work = kTestWork) {
  return Template(source, "hostile.jinja").render({}, max_work);
}

// The render fails with an Error holding `expected`, naming the template.
void expect_error(const std::string& source, const std::string& expected, int64_t max_work = kTestWork) {
  try {
    render(source, max_work);
    ADD_FAILURE() << "no error for a template starting " << source.substr(0, 60);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hostile.jinja"), std::string::npos) << e.what();
  }
}

TEST(HostileTemplates, DeepNestingIsAnErrorNotACrash) {
  expect_error("{{ " + repeat("(", 3000) + "1" + repeat(")", 3000) + " }}", "nested deeper than");
  expect_error("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}", "nested deeper than");
  expect_error(repeat("{% if true %}", 20000) + repeat("{% endif %}", 20000), "nested deeper than");
  expect_error("{{ " + repeat("not ", 100000) + "true }}", "nested deeper than");
  expect_error("{{ 'A'" + repeat("|lower", 100000) + " }}", "nested deeper than");
  expect_error("{{ 1" + repeat(" + 1", 100000) + " }}", "nested deeper than");
  expect_error("{{ x" + repeat(".a", 100000) + " }}", "nested deeper than");
  expect_error("{{ x.99999999999999999999 }}", "integer 99999999999999999999 is out of range");  // found by the fuzz test
}

TEST(HostileTemplates, ModestNestingStillRenders) {
  EXPECT_EQ(render("{{ " + repeat("(", 50) + "1" + repeat(")", 50) + " }}"), "1");
  EXPECT_EQ(render("{{ 'AB'" + repeat("|lower", 100) + " }}"), "ab");
}

TEST(HostileTemplates, HugeExponentsAndRepeatsOfNothingAreInstant) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(render("{{ 1 ** 10**18 }}"), "1");
  EXPECT_EQ(render("{{ 0 ** 9000000000000000000 }}"), "0");
  EXPECT_EQ(render("{{ (-1) ** 1000000000000000001 }}"), "-1");
  EXPECT_EQ(render("{{ 2 ** 62 }}"), "4611686018427387904");
  EXPECT_EQ(render("[{{ '' * 10**18 }}]"), "[]");
  EXPECT_EQ(render("{{ ([] * 10**18)|length }}"), "0");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  expect_error("{{ 2 ** 10**18 }}", "integer overflow");
  expect_error("{{ 'ab' * 10**18 }}", "more than");
  expect_error("{{ ([1] * 10**18)|length }}", "more than");
}

TEST(HostileTemplates, RunawayRendersStopOnTheirBudget) {
  expect_error("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "steps of work");
  // A list rebuilt on every iteration is quadratic; nesting it is also a value ever deeper.
  expect_error("{% set ns = namespace(x=[]) %}{% for i in range(99999) %}{% set ns.x = ns.x + [i] %}{% endfor %}",
               "steps of work");
  // Reaching 1000 levels costs half a million steps: the depth limit, not the budget, must stop this one.
  expect_error("{% set ns = namespace(x=[]) %}{% for i in range(99999) %}{% set ns.x = [ns.x] %}{% endfor %}",
               "nested deeper than", kMaxRenderWork);
  expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "calls nested deeper than");
  // Doubling in a loop is refused at 64 MiB or a million values, long before memory runs out.
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "a string of more than", kMaxRenderWork);
  expect_error("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = ns.x + ns.x %}{% endfor %}",
               "a list or dict of more than", kMaxRenderWork);
  expect_error("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", "bytes");
}

}  // namespace
}  // namespace moetune::text::jinja
