#include "moetune/train/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "moetune/core/error.h"
#include "moetune/io/atomic_file.h"
#include "moetune/io/regular_file.h"

namespace moetune::train {

namespace {

using nlohmann::json;

json with_named_nonfinite(const json& value) {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    const double number = value.get<double>();
    return std::isnan(number) ? "NaN" : number > 0 ? "Infinity" : "-Infinity";
  }
  if (!value.is_structured()) return value;
  json copy = value;
  for (auto& item : copy.items()) item.value() = with_named_nonfinite(item.value());
  return copy;
}

// Keeps the records of steps up to `last_step`; a line that is not a record is kept as it is.
void drop_records_after(const std::filesystem::path& path, int64_t last_step) {
  if (std::filesystem::is_symlink(path)) fail("{}: is a symbolic link; refusing to write through it", path.string());
  if (!std::filesystem::exists(path)) return;
  std::ifstream stream(path);
  std::string kept;
  bool dropped = false;
  for (std::string line; std::getline(stream, line);) {
    const json record = json::parse(line, nullptr, false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() > last_step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped) io::write_text_atomically(path, kept);
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& folder, bool tensorboard, int64_t start_step)
    : path_(folder / "metrics.jsonl") {
  std::filesystem::create_directories(folder);
  drop_records_after(path_, start_step);
  file_ = io::open_for_writing(path_, io::WriteMode::kAppend);
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(folder / "tensorboard");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

// The per-layer router statistics as "<prefix>/moe/layer07/load_max_over_mean" (two digits: TensorBoard sorts
// tags as text).
void MetricsLog::add_moe_scalars(const nlohmann::json& layers, const std::string& prefix, int64_t step) {
  for (const json& layer : layers) {
    if (!layer.is_object() || !layer.contains("layer")) continue;
    const std::string tag = fmt::format("{}/moe/layer{:02d}/", prefix, layer["layer"].get<int64_t>());
    for (const auto& [key, value] : layer.items())
      if (value.is_number() && key != "layer") tensorboard_->add_scalar(tag + key, value.get<double>(), step);
  }
}

void MetricsLog::write(const nlohmann::json& record, const std::string& prefix) {
  const std::string line = with_named_nonfinite(record).dump() + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    fail("{}: write failed: {}", path_.string(), std::strerror(errno));
  if (!tensorboard_) return;
  const int64_t step = record.at("step").get<int64_t>();
  for (const auto& [key, value] : record.items()) {
    if (value.is_number() && key != "step") tensorboard_->add_scalar(prefix + "/" + key, value.get<double>(), step);
    if (key == "moe" && value.is_array()) add_moe_scalars(value, prefix, step);
  }
  tensorboard_->flush();
}

}  // namespace moetune::train
