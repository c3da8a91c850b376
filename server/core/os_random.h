// Random bytes from the operating system's cryptographically secure
// generator, for values that must not be guessed (decode-session ids). On
// Linux, getrandom(2); where that is missing or refused, /dev/urandom.
//
// Thread-safety: thread-safe; no state is kept between calls.
#ifndef CONV1D_SERVER_CORE_OS_RANDOM_H_
#define CONV1D_SERVER_CORE_OS_RANDOM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace conv1d {

// Fills `out` with random bytes. UNAVAILABLE when neither source gives
// them; `out` then holds nothing to use.
absl::Status FillOsRandom(absl::Span<uint8_t> out);

// Fills `out` by reading the file at `path` (a random device such as
// /dev/urandom). UNAVAILABLE naming `path` when it cannot be opened or ends
// early. FillOsRandom's fallback.
absl::Status FillFromRandomDevice(const char* path, absl::Span<uint8_t> out);

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_OS_RANDOM_H_
