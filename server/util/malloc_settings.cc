// glibc malloc settings applied at startup (see malloc_settings.h).
#include "server/util/malloc_settings.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

// The environment's value of `name`, or nullptr when unset or empty.
const char* EnvValue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

std::string ApplyMallocArenaMax(int32_t n) {
  if (const char* env = EnvValue("MALLOC_ARENA_MAX"); env != nullptr) {
    return absl::StrCat(env, " (MALLOC_ARENA_MAX)");
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
  if (const char* env = EnvValue("MALLOC_TRIM_THRESHOLD_"); env != nullptr) {
    return absl::StrCat(env, " (MALLOC_TRIM_THRESHOLD_)");
  }
  if (bytes == 0) return "default";
#ifdef __GLIBC__
  constexpr int kMmapThreshold = 32 << 20;
  if (EnvValue("MALLOC_MMAP_THRESHOLD_") == nullptr &&
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
