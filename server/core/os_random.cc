#include "server/core/os_random.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

#if defined(__linux__)
#include <sys/random.h>
#endif

namespace conv1d {
namespace {

// getrandom(2) until `out` is full; false when the call is missing (ENOSYS),
// refused (EPERM under a seccomp filter) or fails otherwise.
bool FillFromGetrandom(absl::Span<uint8_t> out) {
#if defined(__linux__)
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
#else
  (void)out;
  return false;
#endif
}

}  // namespace

absl::Status FillFromRandomDevice(const char* path, absl::Span<uint8_t> out) {
  int fd = -1;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open '", path, "' for random bytes: ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n == 0 ? "it ended early" : std::strerror(errno);
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot read random bytes from '", path, "': ", why));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

absl::Status FillOsRandom(absl::Span<uint8_t> out) {
  if (FillFromGetrandom(out)) return absl::OkStatus();
  return FillFromRandomDevice("/dev/urandom", out);
}

}  // namespace conv1d
