#include "moetune/train/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "moetune/core/error.h"

namespace moetune::train {

MetricsLog::MetricsLog(const std::filesystem::path& folder, bool tensorboard) : path_(folder / "metrics.jsonl") {
  std::filesystem::create_directories(folder);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) fail("{}: cannot open for writing: {}", path_.string(), std::strerror(errno));
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(folder / "tensorboard");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record, const std::string& prefix) {
  const std::string line = record.dump() + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    fail("{}: write failed: {}", path_.string(), std::strerror(errno));
  if (!tensorboard_) return;
  const int64_t step = record.at("step").get<int64_t>();
  for (const auto& [key, value] : record.items())
    if (value.is_number() && key != "step") tensorboard_->add_scalar(prefix + "/" + key, value.get<double>(), step);
  tensorboard_->flush();
}

}  // namespace moetune::train
