// Where a run's numbers go: metrics.jsonl (one JSON object per record, flushed as written, so a crash loses
// nothing already logged) and, when asked, TensorBoard event files beside it.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "moetune/train/tensorboard.h"

namespace moetune::train {

class MetricsLog {
 public:
  // Appends to an existing metrics.jsonl (a resumed run continues its log).
  MetricsLog(const std::filesystem::path& folder, bool tensorboard);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // `record` must hold "step"; its numeric fields also go to TensorBoard as scalars "<prefix>/<key>".
  void write(const nlohmann::json& record, const std::string& prefix = "train");

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace moetune::train
