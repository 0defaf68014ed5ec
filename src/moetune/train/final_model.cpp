#include "moetune/train/final_model.h"

#include <system_error>

#include "moetune/core/error.h"
#include "moetune/io/atomic_file.h"

namespace moetune::train {

namespace fs = std::filesystem;

void export_final_model(const fs::path& checkpoint, const fs::path& target) {
  const fs::path temporary = target.parent_path() / ("." + target.filename().string() + ".tmp");
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  for (const auto& item : fs::directory_iterator(checkpoint)) {
    const std::string name = item.path().filename().string();
    if (!item.is_regular_file() || name == kTrainerStateFile || is_training_state_file(name)) continue;
    std::error_code linked;
    fs::create_hard_link(item.path(), temporary / name, linked);
    if (linked) io::copy_file_atomically(item.path(), temporary / name);
  }
  fs::remove_all(target);
  fs::rename(temporary, target);
}

}  // namespace moetune::train
