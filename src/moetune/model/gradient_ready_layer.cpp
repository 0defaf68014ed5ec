#include "moetune/model/gradient_ready_layer.h"

#include <charconv>
#include <string_view>

#include "moetune/core/error.h"

namespace moetune::model {

int64_t gradient_ready_layer(const std::string& name, int64_t num_layers) {
  if (name.rfind("embed_tokens", 0) == 0) return -1;
  constexpr std::string_view prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return num_layers;
  int64_t layer = 0;
  const char* begin = name.data() + prefix.size();
  const auto [end, error] = std::from_chars(begin, name.data() + name.size(), layer);
  MOETUNE_CHECK(error == std::errc() && end != begin, "parameter '{}': no layer number after 'layers.'", name);
  return layer;
}

}  // namespace moetune::model
