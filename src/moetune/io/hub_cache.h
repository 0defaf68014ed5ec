// Hugging Face hub ids (`Qwen/Qwen3-30B-A3B`, optionally `@revision`) as model folders, found in the local
// Hugging Face cache the way huggingface_hub lays it out, never over the network:
//   $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub;
//   in it models--<org>--<name>/refs/<revision> holds a commit hash, and snapshots/<commit>/ is the folder.
#pragma once

#include <filesystem>
#include <string>

namespace moetune::io {

// `name` itself when it names something that exists (a local folder always wins) or does not look like a hub
// id; else the snapshot folder of the cache: the revision after '@' (a branch, a tag or a commit hash), else
// "main". A hub id that is not in the cache is an Error that says where it looked and how to download it.
std::filesystem::path resolve_model_folder(const std::string& name);

}  // namespace moetune::io
