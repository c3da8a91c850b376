#include "server/core/admission.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace conv1d {
namespace {

// Coalesces the releases of a burst into one trim, and bounds trims to ten a
// second under steady load.
constexpr absl::Duration kTrimDelay = absl::Milliseconds(100);

// How often the trimmer looks at the heap when nothing made a trim due.
constexpr absl::Duration kHeapCheckPeriod = absl::Milliseconds(500);

// malloc's figures of its heap, compared to tell whether it changed.
struct HeapFigures {
  size_t arena = 0;     // bytes of the arenas' heaps
  size_t ordblks = 0;   // free chunks
  size_t hblkhd = 0;    // bytes mapped on their own
  size_t uordblks = 0;  // bytes in use
  size_t fordblks = 0;  // bytes free
  bool operator==(const HeapFigures& o) const {
    return arena == o.arena && ordblks == o.ordblks && hblkhd == o.hblkhd &&
           uordblks == o.uordblks && fordblks == o.fordblks;
  }
  bool operator!=(const HeapFigures& o) const { return !(*this == o); }
};

// The heap's figures now; all zero where they cannot be known (then only
// released reservations make trims).
HeapFigures ReadHeap() {
  HeapFigures f;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  f.arena = m.arena;
  f.ordblks = m.ordblks;
  f.hblkhd = m.hblkhd;
  f.uordblks = m.uordblks;
  f.fordblks = m.fordblks;
#endif
  return f;
}

// Growth of the anonymous resident size since the last trim that makes the
// periodic look trim even though malloc's figures are as they were then.
constexpr int64_t kResidentGrowthBytes = int64_t{1} << 20;

// This process's resident bytes not backed by a file (the heap among
// them; code pages faulted in are not); -1 where /proc cannot tell.
int64_t AnonResidentBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t total_pages = 0;
  int64_t resident_pages = 0;
  int64_t shared_pages = 0;
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (!(in >> total_pages >> resident_pages >> shared_pages) || page_size <= 0) return -1;
  return (resident_pages - shared_pages) * page_size;
}

// cgroup v2's limit of this process's group; -1 when unlimited or unknown.
int64_t CgroupMemoryMax() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  int64_t bytes = 0;
  if (!(in >> text) || !absl::SimpleAtoi(text, &bytes) || bytes <= 0) return -1;
  return bytes;
}

}  // namespace

int64_t DefaultMaxInflightBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  int64_t physical = pages > 0 && page_size > 0
                         ? static_cast<int64_t>(pages) * page_size
                         : int64_t{4} << 30;
  const int64_t cgroup = CgroupMemoryMax();
  if (cgroup > 0) physical = std::min(physical, cgroup);
  return std::max(physical / 4, kMinInflightBytes);
}

ByteAdmission::Reservation::~Reservation() {
  admission_->Release(bytes_.load(std::memory_order_relaxed));
}

bool ByteAdmission::Reservation::Grow(int64_t bytes) {
  if (bytes <= 0) return true;
  if (!admission_->Add(bytes)) return false;
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

absl::StatusOr<std::unique_ptr<ByteAdmission>> ByteAdmission::Create(
    const AdmissionOptions& options) {
  int64_t max = options.max_inflight_bytes;
  if (max == 0) max = DefaultMaxInflightBytes();
  if (max < kMinInflightBytes || max > kMaxInflightBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_inflight_bytes: ", options.max_inflight_bytes, " is neither 0 nor within ",
        kMinInflightBytes, "..", kMaxInflightBytes));
  }
  if (options.trim_after_released_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trim_after_released_bytes: ", options.trim_after_released_bytes,
        " is negative"));
  }
  return std::unique_ptr<ByteAdmission>(new ByteAdmission(options, max));
}

ByteAdmission::ByteAdmission(const AdmissionOptions& options, int64_t max_inflight_bytes)
    : max_inflight_bytes_(max_inflight_bytes),
      trim_after_released_bytes_(options.trim_after_released_bytes) {
  if (trim_after_released_bytes_ > 0) trimmer_ = std::thread([this] { TrimLoop(); });
}

ByteAdmission::~ByteAdmission() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (trimmer_.joinable()) trimmer_.join();
}

std::shared_ptr<ByteAdmission::Reservation> ByteAdmission::TryReserve(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  if (!Add(bytes)) {
    // The refused bytes were received all the same, and are freed now.
    NoteFreed(bytes);
    return nullptr;
  }
  return std::shared_ptr<Reservation>(new Reservation(this, bytes));
}

absl::Status ByteAdmission::RefusedError(const char* what, int64_t bytes) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", bytes, " bytes would bring the bytes in flight past ",
      "max_inflight_bytes (", max_inflight_bytes_, "; ", inflight_bytes(),
      " held now); retry later"));
}

bool ByteAdmission::Add(int64_t bytes) {
  int64_t now = inflight_.load(std::memory_order_relaxed);
  do {
    if (bytes > max_inflight_bytes_ - now) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!inflight_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

void ByteAdmission::Release(int64_t bytes) {
  if (bytes <= 0) return;
  inflight_.fetch_sub(bytes, std::memory_order_relaxed);
  NoteFreed(bytes);
}

void ByteAdmission::NoteFreed(int64_t bytes) {
  if (trim_after_released_bytes_ == 0 || bytes <= 0) return;
  absl::MutexLock lock(&mu_);
  released_since_trim_ += bytes;
}

int64_t ByteAdmission::trims() const {
  absl::MutexLock lock(&mu_);
  return trims_;
}

void ByteAdmission::TrimLoop() {
  absl::MutexLock lock(&mu_);
  auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || released_since_trim_ >= trim_after_released_bytes_;
  };
  HeapFigures after_trim = ReadHeap();
  int64_t resident_after_trim = AnonResidentBytes();
  while (true) {
    // Released reservations make a trim due at once; memory allocated and
    // freed where no reservation sees it (a stream the transport cancelled
    // over its quota, a burst between two looks) is found by the periodic
    // look, which trims whenever malloc's figures changed at all since the
    // last trim: a rule on one net figure such as the free bytes could be
    // masked (bytes freed in one arena while another's heap shrinks). The
    // figures can come back exactly as they were after trimmed pages were
    // allocated again and freed (the same requests again): the resident
    // size sees those pages.
    if (mu_.AwaitWithTimeout(absl::Condition(&due), kHeapCheckPeriod)) {
      if (stop_) return;
      // Let the rest of a burst finish releasing, then trim once.
      mu_.AwaitWithTimeout(absl::Condition(&stop_), kTrimDelay);
      if (stop_) return;
    }
    const int64_t released = released_since_trim_;
    const bool due_now = released >= trim_after_released_bytes_;
    mu_.Unlock();
    const int64_t resident = AnonResidentBytes();
    const bool trim = due_now || ReadHeap() != after_trim ||
                      (resident >= 0 && resident >= resident_after_trim + kResidentGrowthBytes);
#ifdef __GLIBC__
    if (trim) malloc_trim(0);
#endif
    if (trim) after_trim = ReadHeap();
    if (trim || resident < resident_after_trim) resident_after_trim = AnonResidentBytes();
    mu_.Lock();
    if (trim) {
      ++trims_;
      // What was released during the trim counts towards the next one.
      released_since_trim_ -= released;
    }
  }
}

}  // namespace conv1d
