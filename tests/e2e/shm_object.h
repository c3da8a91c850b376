// A POSIX shared-memory object for the end-to-end suites that place
// tensors in registered system shared-memory regions: created (named
// /conv1d_e2e_<pid>_<n>), sized and mapped read-write on construction,
// unmapped and unlinked on destruction.
//
// Used by tests/e2e/ownership_test.cc and tests/oip/oip_e2e_test.cc. One
// object per test thread; the name counter is not synchronised.
#ifndef CONV1D_TESTS_E2E_SHM_OBJECT_H_
#define CONV1D_TESTS_E2E_SHM_OBJECT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace conv1d::e2e {

struct ShmObject {
  explicit ShmObject(size_t bytes)
      : key(absl::StrCat("/conv1d_e2e_", getpid(), "_", next++)), size(bytes) {
    const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~ShmObject() {
    munmap(base, size);
    shm_unlink(key.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  static inline int next = 0;
  std::string key;
  size_t size;
  char* base = nullptr;
};

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_E2E_SHM_OBJECT_H_
