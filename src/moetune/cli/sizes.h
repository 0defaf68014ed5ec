// Byte sizes as users and transformers write them: "5GB" (10^9), "2GiB" (2^30), "500MB", "40KB", "1024".
#pragma once

#include <cstddef>
#include <string>

namespace moetune::cli {

// `what` names the option in the error for a malformed size.
size_t parse_size(const std::string& text, const std::string& what);

}  // namespace moetune::cli
