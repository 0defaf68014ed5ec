// Which rows begin a document: what the token-mixing recurrences (Mamba2's conv and scan, Gated DeltaNet) restart
// at, so that packed documents compute what each would compute alone.
#pragma once

#include <cstdint>
#include <vector>

namespace moetune::ops {

// One flag per row (token), N = B·S of them: 1 where a document begins (row 0 of each sequence, each packed
// document, each edge between padding and tokens).
using DocumentStarts = std::vector<uint8_t>;

}  // namespace moetune::ops
