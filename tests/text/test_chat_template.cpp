// Chat templates: every fixture conversation (tests/fixtures/chat_templates, rendered by transformers with
// tests/reference/make_chat_fixtures.py) renders byte-identical; the Jinja pieces on their own; the errors for
// constructs the renderer leaves out; and where the template is loaded from.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <map>

#include "moetune/core/error.h"
#include "moetune/text/chat_template.h"
#include "moetune/text/jinja_template.h"
#include "test_util.h"

namespace moetune::text {
namespace {

using OrderedJson = nlohmann::ordered_json;
using jinja::Value;

const OrderedJson& fixture_cases() {
  static const OrderedJson cases =
      OrderedJson::parse(testing::read_file(testing::fixture("chat_templates") / "cases.json"));
  return cases;
}

// "2025-08-05T14:30:00" as a std::tm with the weekday and day of the year filled in, as strftime needs them.
std::tm parse_time(const std::string& iso) {
  std::tm time{};
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &time.tm_year, &time.tm_mon, &time.tm_mday, &time.tm_hour, &time.tm_min,
              &time.tm_sec);
  time.tm_year -= 1900;
  time.tm_mon -= 1;
  const std::time_t seconds = timegm(&time);
  gmtime_r(&seconds, &time);
  return time;
}

// Renders `source` with `variables` (a JSON object) through the Jinja engine alone.
std::string render(const std::string& source, const OrderedJson& variables = OrderedJson::object()) {
  std::vector<std::pair<std::string, Value>> values;
  for (auto it = variables.begin(); it != variables.end(); ++it) values.emplace_back(it.key(), Value::json(it.value()));
  return jinja::Template(source, "t.jinja").render(values);
}

// The message of the Error that parsing or rendering `source` throws, or "" when there is none.
std::string render_error(const std::string& source, const OrderedJson& variables = OrderedJson::object()) {
  try {
    render(source, variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, EveryFixtureCaseRendersByteIdenticalToTransformers) {
  const OrderedJson& document = fixture_cases();
  const std::tm fixed_time = parse_time(document["fixed_time"].get<std::string>());
  std::map<std::string, ChatTemplate> templates;
  size_t identical = 0, raised = 0;
  for (const OrderedJson& test_case : document["cases"]) {
    const std::string folder = test_case["template"].get<std::string>();
    const std::string name = folder + "/" + test_case["name"].get<std::string>();
    if (!templates.count(folder)) {
      templates.emplace(folder, ChatTemplate::from_folder(testing::fixture("chat_templates") / folder));
      templates.at(folder).set_fixed_time(fixed_time);
    }
    const ChatTemplate& chat = templates.at(folder);
    const bool add_generation_prompt = test_case["add_generation_prompt"].get<bool>();
    if (test_case.contains("expected_error")) {
      try {
        chat.apply(test_case["messages"], add_generation_prompt, test_case["extra"]);
        ADD_FAILURE() << name << ": rendered, but transformers raises";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(test_case["expected_error"].get<std::string>()), std::string::npos)
            << name << ": " << e.what();
        ++raised;
      }
      continue;
    }
    const std::string rendered = chat.apply(test_case["messages"], add_generation_prompt, test_case["extra"]);
    EXPECT_EQ(rendered, test_case["expected"].get<std::string>()) << name;
    if (rendered == test_case["expected"].get<std::string>()) ++identical;
  }
  std::printf("chat template fixtures: %zu byte-identical renders, %zu matching raise_exception errors\n", identical,
              raised);
  EXPECT_EQ(identical + raised, document["cases"].size());
}

TEST(Jinja, EverySnippetRendersByteIdenticalToTransformersJinja) {
  size_t identical = 0;
  for (const OrderedJson& snippet : fixture_cases()["snippets"]) {
    const std::string name = snippet["name"].get<std::string>();
    std::string rendered;
    try {
      rendered = render(snippet["template"].get<std::string>(), snippet["variables"]);
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    EXPECT_EQ(rendered, snippet["expected"].get<std::string>()) << name;
    if (rendered == snippet["expected"].get<std::string>()) ++identical;
  }
  std::printf("jinja snippets: %zu of %zu byte-identical\n", identical, fixture_cases()["snippets"].size());
}

// ---- the Jinja pieces ----

TEST(Jinja, WhitespaceControlAndTransformersTrimAndLstripBlocks) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n  {{- 'b' -}}  \n c"), "abc");
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one.
  EXPECT_EQ(render("<\n    {% if true %}\n    x\n    {% endif %}\n>"), "<\n    x\n>");
  EXPECT_EQ(render("x {# note #}\ny"), "x y");
  EXPECT_EQ(render("{{ 'v' }}\nnext"), "v\nnext");           // no trimming after an expression
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");  // + keeps the indentation
  EXPECT_EQ(render("line\n"), "line");                       // the template's final newline is dropped
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
}

TEST(Jinja, ForLoopsWithLoopVariablesFilterElseAndUnpacking) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "1a,2b,3c");
  EXPECT_EQ(
      render("{% for x in xs if x > 1 %}{{ loop.index0 }}/{{ loop.length }}:{{ x }} {% endfor %}", {{"xs", {1, 2, 3}}}),
      "0/2:2 1/2:3 ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"), "-2;1-3;2-;");
  // A set inside the loop body stays in that iteration.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "0");
}

TEST(Jinja, NamespaceAttributesOutliveTheLoop) {
  EXPECT_EQ(render("{% set ns = namespace(found=false, n=0) %}{% for m in ms %}{% if m == 'b' %}"
                   "{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }}",
                   {{"ms", {"a", "b", "c"}}}),
            "True 3");
  EXPECT_NE(render_error("{% set x = 1 %}{% set x.y = 2 %}").find("not a namespace"), std::string::npos);
}

TEST(Jinja, FiltersTrimTojsonJoinDefaultMapAndSelect) {
  EXPECT_EQ(render("[{{ '  x \n'|trim }}]"), "[x]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 'é'}|tojson }}"), "{\"b\": 1, \"a\": \"é\"}");  // key order kept, no \u escape
  EXPECT_EQ(render("{{ [1, {'k': 2.0}]|tojson(indent=2) }}"), "[\n  1,\n  {\n    \"k\": 2.0\n  }\n]");
  EXPECT_EQ(render("{{ [1, 2]|join('+') }} {{ x|default('d') }} {{ 'a'|length }}"), "1+2 d 1");
  EXPECT_EQ(render("{{ users|selectattr('admin')|map(attribute='name')|join(',') }}",
                   {{"users", {{{"name", "a"}, {"admin", true}}, {{"name", "b"}}, {{"name", "c"}, {"admin", true}}}}}),
            "a,c");
  EXPECT_EQ(render("{{ 'Hello'|upper }} {{ 'Hello'|lower }} {{ 'ab'|replace('a', 'x') }} {{ 3|string ~ '!' }}"),
            "HELLO hello xb 3!");
}

TEST(Jinja, SubscriptsAndSlices) {
  const OrderedJson variables = {{"xs", {1, 2, 3, 4}}, {"s", "héllo"}};
  EXPECT_EQ(render("{{ xs[::-1] }} {{ xs[1:] }} {{ xs[-1] }} {{ xs[:-2] }} {{ xs[::2] }}", variables),
            "[4, 3, 2, 1] [2, 3, 4] 4 [1, 2] [1, 3]");
  EXPECT_EQ(render("{{ s[1:3] }} {{ s[::-1] }} {{ s|length }} {{ s[1] }}", variables), "él olléh 5 é");
  EXPECT_EQ(render("[{{ xs[9] }}]", variables), "[]");  // out of range is Undefined, as in Jinja
}

TEST(Jinja, StringMethods) {
  EXPECT_EQ(render("{{ '<think>r</think>\n\nanswer'.split('</think>')[-1].lstrip('\n') }}"), "answer");
  EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '--x--'.strip('-') }}"),
            "['a', 'b', 'c'] ['a,b', 'c'] x");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'hello world'.title() }}"),
            "True True Hello World");
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'no') }} {{ {'a': 1}.keys()|list }}"), "1 no ['a']");
}

TEST(Jinja, UndefinedPrintsNothingAndRaisesWhereJinjaRaises) {
  EXPECT_EQ(render("[{{ nothing }}] {{ nothing is defined }} {{ nothing|length }} {{ 'x' in nothing }}"),
            "[] False 0 False");
  EXPECT_EQ(render("[{{ d.missing }}] {{ d.missing is defined }}", {{"d", OrderedJson::object()}}), "[] False");
  // Jinja's default Undefined raises on attribute access, arithmetic and calls.
  EXPECT_NE(render_error("{{ nothing.attr }}").find("t.jinja:1:4: 'nothing' is undefined"), std::string::npos)
      << render_error("{{ nothing.attr }}");
  EXPECT_NE(render_error("{{ nothing + 1 }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ d.m + 1 }}", {{"d", OrderedJson::object()}}).find("'dict object' has no attribute 'm'"),
            std::string::npos);
}

TEST(Jinja, MacrosWithDefaultsKeywordsAndCaller) {
  EXPECT_EQ(render("{% macro tag(name, body='') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}"
                   "{{ tag('a') }}{{ tag('b', 'x') }}{{ tag(body='y', name='c') }}"),
            "<a></a><b>x</b><c>y</c>");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"), "[in]");
  // As in Jinja, extra arguments need a body that reads varargs / kwargs.
  EXPECT_EQ(render("{% macro all() %}{{ varargs|join(',') }};{{ kwargs.k }}{% endmacro %}{{ all(1, 2, k=3) }}"), "1,2;3");
  EXPECT_NE(render_error("{% macro one(a) %}{% endmacro %}{{ one(1, 2) }}").find("takes not more than 1 argument"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro one(a) %}{% endmacro %}{{ one(b=2) }}").find("takes no keyword argument 'b'"),
            std::string::npos);
}

// ---- errors name the construct and where it is ----

TEST(Jinja, UnsupportedConstructsAreErrorsWithLineAndColumn) {
  EXPECT_NE(
      render_error("line one\n  {{ text|wordwrap(20) }}").find("t.jinja:2:11: filter 'wordwrap' is not supported"),
      std::string::npos)
      << render_error("line one\n  {{ text|wordwrap(20) }}");
  EXPECT_NE(render_error("{% include 'other.jinja' %}").find("t.jinja:1:4: statement 'include' is not supported"),
            std::string::npos);
  EXPECT_NE(render_error("{{ x is escaped_thing }}").find("t.jinja:1:9: test 'escaped_thing' is not supported"),
            std::string::npos);
  EXPECT_NE(render_error("\n{{ 'a{}'.format(1) }}").find("t.jinja:2:"), std::string::npos);
  EXPECT_NE(render_error("\n{{ 'a{}'.format(1) }}").find("str method 'format' is not supported"), std::string::npos);
  EXPECT_NE(render_error("{% for x in xs recursive %}{% endfor %}").find("recursive for loops are not supported"),
            std::string::npos);
  EXPECT_NE(render_error("{{ '%s'|format(1) }}").find("filter 'format' is not supported"), std::string::npos);
  EXPECT_NE(render_error("{% if x %}\nopen").find("t.jinja:1:4: 'if' is never closed"), std::string::npos)
      << render_error("{% if x %}\nopen");
  EXPECT_NE(render_error("{{ 1 + }}").find("t.jinja:1:8: unexpected '}}'"), std::string::npos)
      << render_error("{{ 1 + }}");
  EXPECT_NE(render_error("{% break %}").find("'break' outside a for loop"), std::string::npos);
  EXPECT_NE(render_error("{{ [1, 2] + 'x' }}").find("unsupported operand type(s) for +: 'list' and 'str'"),
            std::string::npos);
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  const ChatTemplate chat = ChatTemplate::from_string("{{ raise_exception('roles must alternate') }}", "t.jinja");
  try {
    chat.apply(OrderedJson::array({{{"role", "user"}, {"content", "x"}}}), false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.jinja:1:4: the template raised an exception: roles must alternate"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplate, SeesSpecialTokensExtraArgumentsToolsAndTime) {
  ChatTemplate chat = ChatTemplate::from_string(
      "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents is none }}|{{ flag }}|{{ add_generation_prompt }}|"
      "{{ strftime_now('%d %b %Y') }}|{{ messages|length }}",
      "t.jinja", {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  chat.set_fixed_time(parse_time("2024-07-26T08:00:00"));
  const OrderedJson messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(chat.apply(messages, true, {{"flag", 7}}), "<s>|</s>|None|True|7|True|26 Jul 2024|1");
  EXPECT_EQ(chat.apply(messages, false, {{"tools", {1}}, {"eos_token", "override"}}),
            "<s>|override|[1]|True||False|26 Jul 2024|1");
  // A plain nlohmann::json converts (its keys sorted).
  EXPECT_EQ(chat.apply(nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}}), false).substr(0, 9),
            "<s>|</s>|");
  EXPECT_THROW(chat.apply(OrderedJson::array(), false), Error);  // as transformers, an empty conversation is refused
}

// ---- loading ----

TEST(ChatTemplate, ChatTemplateJinjaWinsOverTokenizerConfig) {
  testing::ScratchDir dir;
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"chat_template": "from config", "eos_token": {"content": "<eos>", "special": true},
                          "bos_token": null, "pad_token": "<pad>"})");
  testing::write_file(dir / "chat_template.jinja", "from jinja {{ eos_token }}{{ pad_token }}[{{ bos_token }}]\n");
  const ChatTemplate chat = ChatTemplate::from_folder(dir.path());
  EXPECT_EQ(chat.apply(OrderedJson::array({{{"role", "user"}, {"content", "x"}}}), false), "from jinja <eos><pad>[]");

  std::filesystem::remove(dir / "chat_template.jinja");
  EXPECT_EQ(ChatTemplate::from_folder(dir.path()).apply(OrderedJson::array({{{"role", "user"}}}), false),
            "from config");
}

TEST(ChatTemplate, NamedTemplatesInTokenizerConfigUseDefaultOrToolUse) {
  testing::ScratchDir dir;
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                            {"name": "default", "template": "plain"}]})");
  const ChatTemplate chat = ChatTemplate::from_folder(dir.path());
  const OrderedJson messages = OrderedJson::array({{{"role", "user"}}});
  EXPECT_EQ(chat.apply(messages, false), "plain");
  EXPECT_EQ(chat.apply(messages, false, {{"tools", OrderedJson::array()}}), "tools");
  EXPECT_EQ(chat.source(), "plain");
}

TEST(ChatTemplate, SpecialTokensMapFillsInMissingTokens) {
  testing::ScratchDir dir;
  testing::write_file(dir / "tokenizer_config.json", R"({"eos_token": "<e>"})");
  testing::write_file(dir / "special_tokens_map.json", R"({"eos_token": "<other>", "bos_token": {"content": "<b>"}})");
  testing::write_file(dir / "chat_template.jinja", "{{ bos_token }}{{ eos_token }}");
  EXPECT_EQ(ChatTemplate::from_folder(dir.path()).apply(OrderedJson::array({OrderedJson::object()}), false), "<b><e>");
}

TEST(ChatTemplate, MissingTemplateAndBrokenTemplateErrorsNameTheFile) {
  testing::ScratchDir dir;
  testing::write_file(dir / "tokenizer_config.json", R"({"eos_token": "<e>"})");
  try {
    ChatTemplate::from_folder(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string() + ": no chat template"), std::string::npos) << e.what();
  }
  testing::write_file(dir / "chat_template.jinja",
                      "{% for m in messages %}\n    {{ m.content|wordwrap }}\n{% endfor %}");
  try {
    ChatTemplate::from_folder(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja:2:18: filter 'wordwrap' is not supported"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moetune::text
