// A POSIX shared-memory object for the suites that place tensors in, or
// register, system shared-memory regions: created with a fresh name
// (/conv1d_test_<pid>_<n>), sized and mapped read-write on construction;
// unmapped, closed and unlinked on destruction. Resize and Unlink change the
// object under a registry that maps it (the mapping here stays as it was).
//
// Used by tests/e2e/ownership_test.cc, tests/oip/oip_e2e_test.cc,
// tests/oip/shm_registry_test.cc and tests/gpu_e2e/shared_memory_e2e_test.cc.
// Thread-safety: objects may be made on any thread (names come from an
// atomic counter); one object is used by one thread at a time.
#ifndef CONV1D_TESTS_COMMON_SHM_OBJECT_H_
#define CONV1D_TESTS_COMMON_SHM_OBJECT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace conv1d::testing {

class ShmObject {
 public:
  explicit ShmObject(int64_t bytes)
      : key_(absl::StrCat("/conv1d_test_", getpid(), "_", next_++)), size_(bytes) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0) << key_ << ": " << std::strerror(errno);
    Resize(bytes);
    void* base = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd_, 0);
    EXPECT_NE(base, MAP_FAILED) << key_ << ": " << std::strerror(errno);
    base_ = base == MAP_FAILED ? nullptr : static_cast<char*>(base);
  }
  ~ShmObject() {
    if (base_ != nullptr) munmap(base_, static_cast<size_t>(size_));
    if (fd_ >= 0) close(fd_);
    Unlink();
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  // The name to register (shm_open's, with the leading '/').
  const std::string& key() const { return key_; }
  // Bytes created and mapped.
  int64_t size() const { return size_; }
  // The mapping, `size()` bytes.
  char* data() const { return base_; }

  // Truncates or extends the object to `bytes`; size() and the mapping stay.
  void Resize(int64_t bytes) { EXPECT_EQ(ftruncate(fd_, bytes), 0) << std::strerror(errno); }
  // Removes the name early (the mapping stays valid).
  void Unlink() { shm_unlink(key_.c_str()); }

 private:
  static inline std::atomic<int> next_{0};
  std::string key_;
  int64_t size_;
  int fd_ = -1;
  char* base_ = nullptr;
};

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_COMMON_SHM_OBJECT_H_
