// glibc malloc settings applied at startup (see malloc_settings.h).
#include "server/util/malloc_settings.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace conv1d {
namespace {

// The environment's value of `name`, or nullptr when unset or empty.
const char* EnvValue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The value GLIBC_TUNABLES gives the tunable `name` ("glibc.malloc.x"),
// or "" when it gives none. The variable is a colon-separated list of
// name=value; the last setting of a name is the one glibc keeps.
std::string TunableValue(absl::string_view name) {
  const char* tunables = EnvValue("GLIBC_TUNABLES");
  if (tunables == nullptr) return "";
  std::string value;
  for (absl::string_view item : absl::StrSplit(tunables, ':')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first == name && !kv.second.empty()) value = std::string(kv.second);
  }
  return value;
}

// What the environment sets in place of a flag: `env_name`'s value, or the
// GLIBC_TUNABLES entry `tunable`, named for the startup line; "" when
// neither is set.
std::string EnvironmentSetting(const char* env_name, absl::string_view tunable) {
  if (const char* env = EnvValue(env_name); env != nullptr) {
    return absl::StrCat(env, " (", env_name, ")");
  }
  if (std::string v = TunableValue(tunable); !v.empty()) {
    return absl::StrCat(v, " (GLIBC_TUNABLES ", tunable, ")");
  }
  return "";
}

}  // namespace

std::string ApplyMallocArenaMax(int32_t n) {
  if (std::string env = EnvironmentSetting("MALLOC_ARENA_MAX", "glibc.malloc.arena_max");
      !env.empty()) {
    return env;
  }
  if (n == 0) return "default";
#ifdef __GLIBC__
  if (mallopt(M_ARENA_MAX, n) == 1) return absl::StrCat(n);
  return "default (mallopt refused the cap)";
#else
  return "default (not glibc)";
#endif
}

std::string ApplyMallocTrimThreshold(int64_t bytes) {
  if (std::string env =
          EnvironmentSetting("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold");
      !env.empty()) {
    return env;
  }
  if (bytes == 0) return "default";
#ifdef __GLIBC__
  constexpr int kMmapThreshold = 32 << 20;
  if (EnvironmentSetting("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold").empty() &&
      mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1) {
    return "default (mallopt refused the mmap threshold)";
  }
  if (mallopt(M_TRIM_THRESHOLD, static_cast<int>(bytes)) == 1) return absl::StrCat(bytes);
  return "default (mallopt refused the threshold)";
#else
  return "default (not glibc)";
#endif
}

}  // namespace conv1d
