// Mixing several training sources with weights (data.train_weights): each epoch holds as many lines as the
// training data, each source's share in proportion to its weight. A source whose share exceeds its lines is
// repeated (upsampled), one whose share falls short gives a different part of its lines each epoch (downsampled):
// a source's lines are taken as an endless stream of seeded shuffles of them, each epoch continuing where the last
// one stopped. The order is a function of (seed, epoch) alone, so a resumed run (epoch, cursor) replays it exactly.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moetune::data {

struct LineRef;  // loader.h

struct Mixing {
  std::vector<uint32_t> source_of_file;  // by the loader's file index
  std::vector<double> weights;           // by source
  bool empty() const { return weights.empty(); }
};

// The Mixing of data.train's entries from data.train_weights ({entry: weight}): empty when no weights are given;
// else every entry needs a weight >= 0 (and some > 0), and every weight an entry: Errors name data.train_weights
// and the entry.
Mixing mixing_from_recipe(const std::vector<std::string>& entries, const nlohmann::json& weights,
                          std::vector<uint32_t> entry_of_file);

// Epoch `epoch`'s order: indices into `lines`, as many as there are lines; shuffled together when `shuffle`.
std::vector<size_t> mixed_order(const std::vector<LineRef>& lines, const Mixing& mixing, uint64_t seed, int64_t epoch,
                                bool shuffle);

}  // namespace moetune::data
