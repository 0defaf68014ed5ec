// What the GPU router kernels take (one warp per token, one lane per expert group), in a header free of CUDA so
// that the model layer can refuse a config past them when it loads, naming the key, instead of failing mid-run.
#pragma once

namespace moetune::ops {

// 16 register slots a lane: Kimi-K2's 384 experts, and 512.
inline constexpr int kRouterMaxExperts = 512;
inline constexpr int kRouterMaxTopK = 16;
inline constexpr int kRouterMaxGroups = 32;  // both routers' groups (group_limited_greedy, noaux_tc)

}  // namespace moetune::ops
