// Where a checkpoint keeps what: its folder is a clean Hugging Face model folder (config, weights, tokenizer files,
// chat template, generation config: what transformers, vLLM and the hub take), and the training state, which only
// --resume reads (AdamW moments and fp32 parameters, about 3x the model; a folder holding them gets uploaded with
// it), sits in the subfolder training_state/. A finished run's model is the last checkpoint without that subfolder.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace moetune::train {

inline constexpr const char* kTrainingStateFolder = "training_state";
// In the training state folder: step and data position (JSON), and parameters and optimizer moments.
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kTrainingStateFile = "training_state.safetensors";

// The tensors file of one rank of `world`: one rank keeps the historical name.
std::string training_state_file(int rank, int world);

// The folder holding `checkpoint`'s trainer_state.json: its training_state/ subfolder or, for checkpoints written
// before the subfolder existed (read for one release, so that runs started then can resume), the checkpoint folder
// itself. Nothing when there is neither: the folder is not a checkpoint.
std::optional<std::filesystem::path> find_training_state(const std::filesystem::path& checkpoint);

// Makes `target` hold the model files of `checkpoint` (its regular files; the training state subfolder stays
// behind), replacing an earlier `target`. The files are hard links where the filesystem allows (no second copy of
// the weights on disk), copies elsewhere; the folder appears whole or not at all.
void export_final_model(const std::filesystem::path& checkpoint, const std::filesystem::path& target);

}  // namespace moetune::train
