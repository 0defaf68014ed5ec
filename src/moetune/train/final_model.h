// The model a finished run hands over: the last checkpoint's Hugging Face folder without the training state
// (AdamW moments and fp32 parameters are about 3x the model, and a folder holding them gets uploaded with it).
#pragma once

#include <filesystem>
#include <string>

namespace moetune::train {

// A checkpoint's training state: its step and data position, and its parameters and optimizer moments.
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kTrainingStateFile = "training_state.safetensors";
// training_state.safetensors, or a rank's training_state-rank00001-of-00002.safetensors.
inline bool is_training_state_file(const std::string& name) {
  return name == kTrainingStateFile || (name.starts_with("training_state-rank") && name.ends_with(".safetensors"));
}

// Makes `target` hold the model files of `checkpoint` (everything but the training state), replacing an earlier
// `target`. The files are hard links where the filesystem allows (no second copy of the weights on disk), copies
// elsewhere; the folder appears whole or not at all.
void export_final_model(const std::filesystem::path& checkpoint, const std::filesystem::path& target);

}  // namespace moetune::train
