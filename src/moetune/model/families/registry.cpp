#include "moetune/model/families/family.h"

namespace moetune::model {

extern const Family kLlamaFamily, kQwen3Family, kQwen3MoeFamily, kMixtralFamily, kQwen2MoeFamily, kGptOssFamily,
    kDeepseekV3Family, kNemotronHFamily, kQwen2Family, kMistralFamily, kGlm4MoeFamily, kGlm4MoeLiteFamily, kPhi3Family,
    kSmolLM3Family, kOlmoeFamily, kMinistralFamily, kMiniMaxM2Family, kDots1Family, kDeepseekV2Family, kOlmo2Family,
    kOlmo3Family, kSolarOpenFamily, kExaone4Family, kFlexOlmoFamily, kExaoneMoeFamily, kGemmaFamily, kGemma3Family,
    kErnie4_5MoeFamily, kErnie4_5Family, kArceeFamily, kGraniteFamily, kGraniteMoeFamily, kGraniteMoeSharedFamily,
    kGraniteMoeHybridFamily, kGraniteSwaFamily, kGraniteMoeSwaFamily, kGlm4Family, kQwen3NextFamily, kQwen3_5Family,
    kQwen3_5MoeFamily;

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {&kLlamaFamily,
                                                 &kQwen3Family,
                                                 &kQwen3MoeFamily,
                                                 &kMixtralFamily,
                                                 &kQwen2MoeFamily,
                                                 &kGptOssFamily,
                                                 &kDeepseekV3Family,
                                                 &kNemotronHFamily,
                                                 &kQwen2Family,
                                                 &kMistralFamily,
                                                 &kGlm4MoeFamily,
                                                 &kGlm4MoeLiteFamily,
                                                 &kPhi3Family,
                                                 &kSmolLM3Family,
                                                 &kOlmoeFamily,
                                                 &kMinistralFamily,
                                                 &kMiniMaxM2Family,
                                                 &kDots1Family,
                                                 &kDeepseekV2Family,
                                                 &kOlmo2Family,
                                                 &kOlmo3Family,
                                                 &kSolarOpenFamily,
                                                 &kExaone4Family,
                                                 &kFlexOlmoFamily,
                                                 &kExaoneMoeFamily,
                                                 &kGemmaFamily,
                                                 &kGemma3Family,
                                                 &kErnie4_5MoeFamily,
                                                 &kErnie4_5Family,
                                                 &kArceeFamily,
                                                 &kGraniteFamily,
                                                 &kGraniteMoeFamily,
                                                 &kGraniteMoeSharedFamily,
                                                 &kGraniteMoeHybridFamily,
                                                 &kGraniteSwaFamily,
                                                 &kGraniteMoeSwaFamily,
                                                 &kGlm4Family,
                                                 &kQwen3NextFamily,
                                                 &kQwen3_5Family,
                                                 &kQwen3_5MoeFamily};
  return all;
}

}  // namespace moetune::model
