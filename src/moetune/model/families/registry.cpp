#include "moetune/model/families/family.h"

namespace moetune::model {

extern const Family kLlamaFamily, kQwen3Family, kQwen3MoeFamily, kMixtralFamily, kQwen2MoeFamily, kGptOssFamily;

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {&kLlamaFamily, &kQwen3Family, &kQwen3MoeFamily, &kMixtralFamily,
                                                 &kQwen2MoeFamily, &kGptOssFamily};
  return all;
}

}  // namespace moetune::model
