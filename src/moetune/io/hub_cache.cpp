#include "moetune/io/hub_cache.h"

#include <cstdlib>
#include <regex>

#include "moetune/core/error.h"
#include "moetune/io/regular_file.h"

namespace moetune::io {

namespace fs = std::filesystem;

namespace {

fs::path hub_cache_folder() {
  const auto env = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char* cache = env("HF_HUB_CACHE")) return cache;
  if (const char* home = env("HF_HOME")) return fs::path(home) / "hub";
  if (const char* xdg = env("XDG_CACHE_HOME")) return fs::path(xdg) / "huggingface" / "hub";
  if (const char* home = env("HOME")) return fs::path(home) / ".cache" / "huggingface" / "hub";
  return fs::path(".cache") / "huggingface" / "hub";
}

// The commit a revision names: a ref's file holds it, else the revision is a commit hash itself.
std::string commit_of(const fs::path& repo, const std::string& revision) {
  const fs::path ref = repo / "refs" / revision;
  if (fs::is_regular_file(ref)) {
    std::string commit = read_regular_file(ref, "the Hugging Face cache ref", 1024);
    commit.erase(commit.find_last_not_of(" \t\r\n") + 1);
    return commit;
  }
  return revision;
}

}  // namespace

fs::path resolve_model_folder(const std::string& name) {
  // What huggingface_hub accepts as a repo id: org/name of letters, digits, '-', '_', '.'; '@' then a revision.
  static const std::regex kHubId(R"(([A-Za-z0-9][A-Za-z0-9_.-]*)/([A-Za-z0-9][A-Za-z0-9_.-]*)(@([A-Za-z0-9_./-]+))?)");
  std::smatch id;
  if (fs::exists(name) || !std::regex_match(name, id, kHubId)) return name;
  const std::string repo_id = id[1].str() + "/" + id[2].str();
  const std::string revision = id[4].matched ? id[4].str() : "main";
  const fs::path repo = hub_cache_folder() / ("models--" + id[1].str() + "--" + id[2].str());
  const std::string commit = commit_of(repo, revision);
  const fs::path snapshot = repo / "snapshots" / commit;
  if (commit.find("..") == std::string::npos && fs::is_regular_file(snapshot / "config.json")) return snapshot;
  fail("'{}' is no local folder, and revision '{}' of the hub model {} is not in the Hugging Face cache (looked for "
       "{}). moetune never downloads: fetch it with `hf download {}{}` (or point HF_HUB_CACHE / HF_HOME at the "
       "cache that holds it), or give the model folder's path",
       name, revision, repo_id, (snapshot / "config.json").string(), repo_id,
       id[4].matched ? " --revision " + revision : "");
}

}  // namespace moetune::io
