// ByteAdmission: admission of requests by the bytes they hold in memory.
//
// The frontend reserves a request's received bytes the moment its handler
// sees them, before anything is parsed or copied, and grows the reservation
// by the response's bytes once those are known; the reservation ends when the
// answer has been handed to the transport and sent (the last reference to a
// Reservation goes away). A reservation that would take the bytes in flight
// past max_inflight_bytes is refused, and the caller answers
// RESOURCE_EXHAUSTED, so memory held for requests is bounded whatever the
// number of clients or the size of their messages (a request count bounds
// nothing when one message may be 1 GiB).
//
// Freed request buffers stay in glibc's heap unless trimmed. A background
// thread returns free heap pages to the system (malloc_trim) soon after
// trim_after_released_bytes have been released or refused, and at its look
// twice a second whenever malloc's figures of the heap changed at all, or
// the anonymous resident size grew by 1 MiB, since the last trim; so a
// server that went idle after a burst of large requests is back near its
// idle resident size within a second. A server whose memory does not change
// does not trim; a busy one at most ten times a second, about a
// millisecond per GiB of heap each.
//
// Thread-safety: every method is thread-safe; Reservations may be released
// on any thread.
#ifndef CONV1D_SERVER_CORE_ADMISSION_H_
#define CONV1D_SERVER_CORE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace conv1d {

struct AdmissionOptions {
  // Most bytes of requests and their responses held at once. 0 picks
  // DefaultMaxInflightBytes() (a quarter of physical memory, or of the
  // cgroup's memory limit when lower). Range 0 or 1 MiB .. 2^62;
  // INVALID_ARGUMENT "max_inflight_bytes" otherwise. A request larger than
  // this is always refused.
  int64_t max_inflight_bytes = 0;
  // Return free heap memory to the system after this many bytes were
  // released since the last time (64 MiB: a few large requests; trimming
  // takes about a millisecond per GiB of heap). 0 never trims. >= 0.
  int64_t trim_after_released_bytes = int64_t{64} << 20;
};

inline constexpr int64_t kMinInflightBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxInflightBytes = int64_t{1} << 62;

// A quarter of MemTotal, or of the cgroup v2 memory.max when that is lower;
// 1 GiB when neither can be read.
int64_t DefaultMaxInflightBytes();

class ByteAdmission {
 public:
  // Bytes held for one request; released when destroyed.
  class Reservation {
   public:
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;

    // Adds `bytes` (>= 0) to this reservation; false (and nothing added)
    // when that would pass the limit.
    bool Grow(int64_t bytes);
    int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

   private:
    friend class ByteAdmission;
    explicit Reservation(ByteAdmission* admission, int64_t bytes)
        : admission_(admission), bytes_(bytes) {}
    ByteAdmission* const admission_;
    std::atomic<int64_t> bytes_;
  };

  static absl::StatusOr<std::unique_ptr<ByteAdmission>> Create(
      const AdmissionOptions& options);
  // REQUIRES: every Reservation has been released.
  ~ByteAdmission();

  ByteAdmission(const ByteAdmission&) = delete;
  ByteAdmission& operator=(const ByteAdmission&) = delete;

  // A reservation of `bytes` (>= 0), or null when the bytes in flight would
  // pass the limit (the caller then frees them: they count towards a trim).
  std::shared_ptr<Reservation> TryReserve(int64_t bytes);

  // RESOURCE_EXHAUSTED naming the limit, for a refused `bytes` of `what`.
  absl::Status RefusedError(const char* what, int64_t bytes) const;

  int64_t max_inflight_bytes() const { return max_inflight_bytes_; }
  int64_t inflight_bytes() const { return inflight_.load(std::memory_order_relaxed); }
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Times free heap memory was returned to the system.
  int64_t trims() const;

 private:
  explicit ByteAdmission(const AdmissionOptions& options, int64_t max_inflight_bytes);
  bool Add(int64_t bytes);
  void Release(int64_t bytes);
  // Counts bytes freed towards the next trim.
  void NoteFreed(int64_t bytes);
  void TrimLoop();

  const int64_t max_inflight_bytes_;
  const int64_t trim_after_released_bytes_;
  std::atomic<int64_t> inflight_{0};
  std::atomic<int64_t> refused_{0};

  mutable absl::Mutex mu_;
  int64_t released_since_trim_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread trimmer_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_ADMISSION_H_
