#include "moetune/train/checkpoint_layout.h"

#include <fmt/format.h>

#include <system_error>

#include "moetune/io/atomic_file.h"

namespace moetune::train {

namespace fs = std::filesystem;

std::string training_state_file(int rank, int world) {
  if (world == 1) return kTrainingStateFile;
  return fmt::format("training_state-rank{:05d}-of-{:05d}.safetensors", rank, world);
}

std::optional<fs::path> find_training_state(const fs::path& checkpoint) {
  for (const fs::path& folder : {checkpoint / kTrainingStateFolder, checkpoint})
    if (fs::is_regular_file(folder / kTrainerStateFile)) return folder;
  return std::nullopt;
}

void export_final_model(const fs::path& checkpoint, const fs::path& target) {
  const fs::path temporary = target.parent_path() / ("." + target.filename().string() + ".tmp");
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  for (const auto& item : fs::directory_iterator(checkpoint)) {
    if (!item.is_regular_file()) continue;
    const fs::path name = item.path().filename();
    std::error_code linked;
    fs::create_hard_link(item.path(), temporary / name, linked);
    if (linked) io::copy_file_atomically(item.path(), temporary / name);
  }
  fs::remove_all(target);
  fs::rename(temporary, target);
}

}  // namespace moetune::train
