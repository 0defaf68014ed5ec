// Which rows begin a document: what the token-mixing recurrences (Mamba2's conv and scan, Gated DeltaNet) restart
// at, so that packed documents compute what each would compute alone.
#pragma once

#include <cstdint>
#include <vector>

namespace moetune::ops {

// One flag per row (token), N = B·S of them: 1 where a document begins (row 0 of each sequence, each packed
// document, each edge between padding and tokens).
using DocumentStarts = std::vector<uint8_t>;

// The rows whose flag is set, ascending.
inline std::vector<int64_t> document_start_rows(const DocumentStarts& starts) {
  std::vector<int64_t> rows;
  for (size_t n = 0; n < starts.size(); ++n)
    if (starts[n]) rows.push_back(int64_t(n));
  return rows;
}

}  // namespace moetune::ops
