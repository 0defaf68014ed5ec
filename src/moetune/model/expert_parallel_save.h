// One HF folder written by the expert-parallel ranks together, with no gathering: rank r of an expert-parallel
// group writes the experts it holds to model-(r+1)-of-(E).safetensors (rank 0 adds every dense tensor), and
// rank 0 writes the index and config.json. The result is an ordinary sharded folder that transformers loads,
// with each expert under its per-expert HF names.
#pragma once

#include <filesystem>

#include "moetune/model/checkpoint.h"

namespace moetune::model {

// This rank's file; `weights` hold shard weights.experts of the experts. Dense tensors only when `with_dense`.
void save_expert_shard(const ModelWeights& weights, const std::filesystem::path& folder, bool with_dense);

// The index naming every shard's tensors (computed from the layout: every rank's names are known here), and
// config.json with the model's companion files. Called by one rank after every shard is written.
void save_expert_sharded_index(const ModelWeights& weights, const std::filesystem::path& folder);

}  // namespace moetune::model
