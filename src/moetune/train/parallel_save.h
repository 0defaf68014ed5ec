// Saving a model trained on several ranks, for both engines: with expert parallelism each rank of the first
// data-parallel replica writes its experts (rank 0 also the dense tensors and the index); without it rank 0
// writes the whole (every rank holds the same weights). Every rank calls it; it does not synchronise.
#pragma once

#include <filesystem>
#include <functional>

#include "moetune/model/checkpoint.h"
#include "moetune/parallel/parallel_layout.h"

namespace moetune::train {

void save_on_ranks(const model::ModelWeights& weights, const parallel::ParallelLayout& layout,
                   const std::filesystem::path& folder, const std::function<void()>& save_whole);

}  // namespace moetune::train
