// glibc malloc settings the server applies at startup.
//
// Both calls change process-wide allocator parameters (mallopt) and must run
// before the server starts its threads; neither is thread-safe. Each returns
// what is in effect, for the startup line. A setting glibc reads itself from
// the environment (MALLOC_ARENA_MAX, MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_, or their glibc.malloc.* entries in GLIBC_TUNABLES)
// wins over the flag; builds without glibc leave the allocator as it is.
#ifndef CONV1D_SERVER_UTIL_MALLOC_SETTINGS_H_
#define CONV1D_SERVER_UTIL_MALLOC_SETTINGS_H_

#include <cstdint>
#include <string>

namespace conv1d {

// Largest value ApplyMallocTrimThreshold takes (mallopt's parameter is an
// int).
inline constexpr int64_t kMaxMallocTrimThreshold = 2147483647;

// Caps glibc's malloc arenas at `n` (0: glibc's default, 8 per core).
std::string ApplyMallocArenaMax(int32_t n);

// Fixes the free bytes at the top of a malloc heap above which a free()
// returns them to the system (0: glibc's default). glibc's default threshold
// grows with the largest freed block, to 64 MiB, and malloc_trim(3) never
// shortens the top of a thread's arena: after a burst of large requests each
// arena could keep up to 64 MiB resident. A fixed threshold also fixes the
// size from which allocations are mapped on their own (32 MiB, the largest
// glibc's own adjustment would reach) unless MALLOC_MMAP_THRESHOLD_ is set.
std::string ApplyMallocTrimThreshold(int64_t bytes);

}  // namespace conv1d

#endif  // CONV1D_SERVER_UTIL_MALLOC_SETTINGS_H_
