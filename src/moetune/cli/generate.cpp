#include "moetune/cli/generate.h"

#include <cmath>

#include "moetune/core/error.h"
#include "moetune/data/text_codec.h"

namespace moetune::cli {

// NaN passes every comparison CLI11's range checks make, so the options are checked here.
void check_generate_options(const model::GenerateOptions& options) {
  if (options.max_new_tokens < 0) fail("--max-new-tokens {} must not be negative", options.max_new_tokens);
  if (!std::isfinite(options.temperature) || options.temperature < 0)
    fail("--temperature {} must be a finite number, 0 or more (0: greedy)", options.temperature);
  if (!(options.top_p > 0 && options.top_p <= 1)) fail("--top-p {} must be in (0, 1]", options.top_p);
}

std::string reply_text(model::CausalLM& model, const data::ModelText& text, const std::string& prompt,
                       model::GenerateOptions options) {
  options.stop_ids = text.stop_ids;
  const std::vector<int64_t> ids = model::generate(model, text.codec.encode(prompt), options);
  return text.tokenizer->decode(std::vector<int32_t>(ids.begin(), ids.end()), /*skip_special_tokens=*/true);
}

std::string run_generate(const GenerateArgs& args) {
  check_generate_options(args.options);
  const data::ModelText text = data::load_model_text(args.model);
  if (!text.tokenizer) fail("{}: no tokenizer.json, so there is no text to generate", args.model.string());
  std::string prompt = args.prompt;
  if (args.chat) {
    if (!text.codec.render_chat) fail("{}: --chat, but the model has no chat template", args.model.string());
    prompt = text.codec.render_chat(data::Json::array({{{"role", "user"}, {"content", args.prompt}}}), true, data::Json());
  }
  model::CausalLM model = model::CausalLM::from_pretrained(args.model);
  return reply_text(model, text, prompt, args.options);
}

}  // namespace moetune::cli
