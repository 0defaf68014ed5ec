// Where a run's numbers go: metrics.jsonl (one JSON object per record, flushed as written, so a crash loses
// nothing already logged) and, when asked, TensorBoard event files beside it. A NaN or infinite number is
// written as the string "NaN", "Infinity" or "-Infinity" (nlohmann would write null, which reads as "missing").
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "moetune/train/tensorboard.h"

namespace moetune::train {

class MetricsLog {
 public:
  // Continues an existing metrics.jsonl from `start_step`: the records of later steps (written by a run that
  // went on past the checkpoint it is resumed from) are dropped first. A symlink there is refused.
  MetricsLog(const std::filesystem::path& folder, bool tensorboard, int64_t start_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // `record` must hold "step"; its numeric fields also go to TensorBoard as scalars "<prefix>/<key>", and its
  // "moe" list's per-layer numbers as "<prefix>/moe/layerNN/<key>".
  void write(const nlohmann::json& record, const std::string& prefix = "train");

 private:
  void add_moe_scalars(const nlohmann::json& layers, const std::string& prefix, int64_t step);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace moetune::train
