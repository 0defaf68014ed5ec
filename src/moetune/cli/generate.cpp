#include "moetune/cli/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "moetune/cli/device_choice.h"
#include "moetune/core/device.h"
#include "moetune/core/error.h"
#include "moetune/data/text_codec.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"

namespace moetune::cli {
// NaN passes every comparison CLI11's range checks make, so the options are checked here.
void check_generate_options(const model::GenerateOptions& options) {
  if (options.max_new_tokens < 0) fail("--max-new-tokens {} must not be negative", options.max_new_tokens);
  if (!std::isfinite(options.temperature) || options.temperature < 0)
    fail("--temperature {} must be a finite number, 0 or more (0: greedy)", options.temperature);
  if (!(options.top_p > 0 && options.top_p <= 1)) fail("--top-p {} must be in (0, 1]", options.top_p);
}

std::unique_ptr<model::LanguageModel> load_generation_model(const std::filesystem::path& folder,
                                                            const std::string& device) {
  return model::load_language_model(folder, choose_device(folder, device, ModelUse::Generation));
}

std::string format_timing(const model::GenerateTiming& timing, const model::LanguageModel& model) {
  return fmt::format("prefill: {} tokens in {:.1f} ms; decode: {} tokens in {:.1f} ms, {:.1f} tokens/s ({})",
                     timing.prompt_tokens, timing.prefill_seconds * 1e3, std::max<int64_t>(timing.new_tokens - 1, 0),
                     timing.decode_seconds * 1e3, timing.decode_tokens_per_second(),
                     model.device().is_cpu() ? "cpu" : "cuda");
}

std::string reply_text(model::LanguageModel& model, const data::ModelText& text, const std::string& prompt,
                       model::GenerateOptions options, model::GenerateTiming* timing) {
  options.stop_ids = text.stop_ids;
  const std::vector<int64_t> ids = model::generate(model, text.codec.encode(prompt), options, timing);
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
  const std::unique_ptr<model::LanguageModel> model = load_generation_model(args.model, args.device);
  model::GenerateTiming timing;
  std::string reply = reply_text(*model, text, prompt, args.options, &timing);
  if (args.speed) std::fprintf(stderr, "%s\n", format_timing(timing, *model).c_str());
  return reply;
}

}  // namespace moetune::cli
