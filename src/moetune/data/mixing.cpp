#include "moetune/data/mixing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "moetune/core/error.h"
#include "moetune/data/loader.h"
#include "moetune/io/json_file.h"

namespace moetune::data {
namespace {

// Each source's number of lines in an epoch of `total` lines: proportional to its weight, rounded by largest
// remainder so that they add up to `total` exactly.
std::vector<int64_t> shares(const std::vector<double>& weights, int64_t total) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> counts(weights.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = double(total) * weights[i] / sum;
    counts[i] = int64_t(std::floor(exact));
    given += counts[i];
    remainders.emplace_back(exact - double(counts[i]), i);
  }
  // Larger remainders first; ties to the earlier source, so the result does not depend on the sort.
  std::sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t k = 0; given < total && k < remainders.size(); ++k, ++given) ++counts[remainders[k].second];
  return counts;
}

}  // namespace

Mixing mixing_from_recipe(const std::vector<std::string>& entries, const nlohmann::json& weights,
                          std::vector<uint32_t> entry_of_file) {
  if (weights.is_null() || (weights.is_object() && weights.empty())) return {};
  if (!weights.is_object()) fail("data.train_weights must be a mapping {{entry: weight}}, got {}", io::abbreviated_dump(weights));
  Mixing mixing;
  mixing.source_of_file = std::move(entry_of_file);
  for (const std::string& entry : entries) {
    auto found = weights.find(entry);
    if (found == weights.end()) fail("data.train_weights: no weight for the data.train entry '{}'", entry);
    if (!found->is_number() || !std::isfinite(found->get<double>()) || found->get<double>() < 0)
      fail("data.train_weights.{}: expected a number >= 0, got {}", entry, io::abbreviated_dump(*found));
    mixing.weights.push_back(found->get<double>());
  }
  for (const auto& [entry, weight] : weights.items())
    if (std::find(entries.begin(), entries.end(), entry) == entries.end())
      fail("data.train_weights.{}: not an entry of data.train", entry);
  if (std::accumulate(mixing.weights.begin(), mixing.weights.end(), 0.0) <= 0)
    fail("data.train_weights: every weight is 0: nothing would be trained on");
  return mixing;
}

std::vector<size_t> mixed_order(const std::vector<LineRef>& lines, const Mixing& mixing, uint64_t seed, int64_t epoch,
                                bool shuffle) {
  std::vector<std::vector<size_t>> by_source(mixing.weights.size());
  for (size_t i = 0; i < lines.size(); ++i) by_source[mixing.source_of_file.at(lines[i].file)].push_back(i);
  const std::vector<int64_t> counts = shares(mixing.weights, int64_t(lines.size()));
  std::vector<size_t> order;
  order.reserve(lines.size());
  for (size_t source = 0; source < by_source.size(); ++source) {
    const std::vector<size_t>& own = by_source[source];
    if (counts[source] == 0) continue;
    if (own.empty()) fail("data.train_weights: source {} has weight but no training lines (all in validation?)", source);
    const auto n = int64_t(own.size());
    // The stream's items epoch * count ... (epoch + 1) * count - 1; item k is pass k / n's shuffle at k % n.
    int64_t pass = -1;
    std::vector<size_t> pass_order;
    for (int64_t k = epoch * counts[source]; k < (epoch + 1) * counts[source]; ++k) {
      if (k / n != pass) {
        pass = k / n;
        pass_order = own;
        if (shuffle)
          std::shuffle(pass_order.begin(), pass_order.end(),
                       std::mt19937_64(seed * 1000003ull + uint64_t(pass) * 7919ull + uint64_t(source) * 104729ull));
      }
      order.push_back(pass_order[size_t(k % n)]);
    }
  }
  if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed * 1000003ull + uint64_t(epoch)));
  return order;
}

}  // namespace moetune::data
