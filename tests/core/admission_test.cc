// ByteAdmission: reservations up to the limit and not past it, growth,
// release on the last reference from any thread, option checks, the default
// from physical memory, and trimming after large releases and once after
// the heap changed.
#include "server/core/admission.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace conv1d {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::unique_ptr<ByteAdmission> Make(int64_t max_bytes, int64_t trim_after = 0) {
  AdmissionOptions o;
  o.max_inflight_bytes = max_bytes;
  o.trim_after_released_bytes = trim_after;
  auto a = ByteAdmission::Create(o);
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(*a);
}

TEST(ByteAdmission, ReservesUpToTheLimitAndReleasesOnTheLastReference) {
  auto a = Make(10 * kMiB);
  auto r1 = a->TryReserve(6 * kMiB);
  ASSERT_NE(r1, nullptr);
  EXPECT_EQ(a->inflight_bytes(), 6 * kMiB);
  EXPECT_EQ(a->TryReserve(4 * kMiB + 1), nullptr);
  EXPECT_EQ(a->refused(), 1);
  auto r2 = a->TryReserve(4 * kMiB);  // exactly the limit
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(a->inflight_bytes(), 10 * kMiB);
  EXPECT_EQ(a->TryReserve(1), nullptr);
  EXPECT_NE(a->TryReserve(0), nullptr);
  std::shared_ptr<ByteAdmission::Reservation> copy = r1;
  r1.reset();
  EXPECT_EQ(a->inflight_bytes(), 10 * kMiB);  // `copy` still holds it
  copy.reset();
  EXPECT_EQ(a->inflight_bytes(), 4 * kMiB);
  r2.reset();
  EXPECT_EQ(a->inflight_bytes(), 0);
}

TEST(ByteAdmission, GrowAddsOnlyWhatFits) {
  auto a = Make(8 * kMiB);
  auto r = a->TryReserve(3 * kMiB);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->Grow(4 * kMiB));
  EXPECT_EQ(r->bytes(), 7 * kMiB);
  EXPECT_FALSE(r->Grow(2 * kMiB));
  EXPECT_EQ(r->bytes(), 7 * kMiB);
  EXPECT_EQ(a->inflight_bytes(), 7 * kMiB);
  EXPECT_TRUE(r->Grow(0));
  r.reset();
  EXPECT_EQ(a->inflight_bytes(), 0);
  const absl::Status refused = a->RefusedError("request", 9 * kMiB);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("max_inflight_bytes (8388608"), absl::string_view::npos)
      << refused;
}

TEST(ByteAdmission, ConcurrentReservationsNeverPassTheLimit) {
  constexpr int64_t kLimit = 64 * kMiB;
  auto a = Make(kLimit);
  std::atomic<int64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto r = a->TryReserve((t + 1) * kMiB + i % 7);
        const int64_t now = a->inflight_bytes();
        int64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        if (r != nullptr && i % 3 == 0) r->Grow(kMiB);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(peak.load(), kLimit);
  EXPECT_EQ(a->inflight_bytes(), 0);
}

TEST(ByteAdmission, OptionsAreChecked) {
  AdmissionOptions o;
  o.max_inflight_bytes = kMinInflightBytes - 1;
  auto bad = ByteAdmission::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("max_inflight_bytes"), 0u);
  o.max_inflight_bytes = -1;
  EXPECT_FALSE(ByteAdmission::Create(o).ok());
  o.max_inflight_bytes = kMiB;
  o.trim_after_released_bytes = -1;
  EXPECT_EQ(ByteAdmission::Create(o).status().message().find("trim_after_released_bytes"),
            0u);
}

TEST(ByteAdmission, DefaultIsAQuarterOfPhysicalMemory) {
  const int64_t physical =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const int64_t d = DefaultMaxInflightBytes();
  EXPECT_GE(d, kMinInflightBytes);
  EXPECT_LE(d, physical / 4);
  AdmissionOptions o;  // 0: the default
  auto a = ByteAdmission::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->max_inflight_bytes(), d);
}

// Waits until `a` has not trimmed for `quiet`; returns its trims then.
int64_t TrimsOnceSettled(ByteAdmission* a, absl::Duration quiet) {
  int64_t trims = a->trims();
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(quiet);
    const int64_t now = a->trims();
    if (now == trims) break;
    trims = now;
  }
  return trims;
}

// Waits up to 10 s (the trimmer looks every 0.5 s; a loaded machine may
// delay it) for `a` to trim more than `than` times; returns its trims.
int64_t TrimsAfter(ByteAdmission* a, int64_t than) {
  for (int i = 0; i < 200 && a->trims() <= than; ++i) absl::SleepFor(absl::Milliseconds(50));
  return a->trims();
}

TEST(ByteAdmission, LargeReleasesTrimTheHeap) {
  auto a = Make(1024 * kMiB, /*trim_after=*/4 * kMiB);
  // A reservation's own two small allocations, once: later reservations
  // reuse them from the thread's cache and leave malloc's figures as they
  // are, so only the released bytes can make a trim below.
  { auto r = a->TryReserve(1); }
  const int64_t settled = TrimsOnceSettled(a.get(), absl::Milliseconds(1200));
  { auto r = a->TryReserve(3 * kMiB); }
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_EQ(a->trims(), settled);  // 3 MiB released, the heap unchanged: no trim
  { auto r = a->TryReserve(2 * kMiB); }
  EXPECT_EQ(TrimsAfter(a.get(), settled), settled + 1);
  // A refusal counts its bytes as released (the caller frees them).
  EXPECT_EQ(a->TryReserve(2048 * kMiB), nullptr);
  EXPECT_EQ(TrimsAfter(a.get(), settled + 1), settled + 2);
}

TEST(ByteAdmission, AHeapThatChangedIsTrimmedOnce) {
  // Never due by bytes: only the look at the heap trims here.
  auto a = Make(1024 * kMiB, /*trim_after=*/1024 * kMiB);
  const int64_t settled = TrimsOnceSettled(a.get(), absl::Milliseconds(1200));
  // 4 MiB of 64 KiB blocks (under malloc's mmap threshold), freed below a
  // block that stays, so they stay in the heap as free chunks.
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 64; ++i) {
    blocks.emplace_back(new char[64 << 10]);
    std::memset(blocks.back().get(), i, 64 << 10);
  }
  std::unique_ptr<char[]> pin(new char[64 << 10]);
  std::memset(pin.get(), 1, 64 << 10);
  blocks.clear();
  EXPECT_EQ(TrimsAfter(a.get(), settled), settled + 1);
  // Unchanged since: no more trims.
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_EQ(a->trims(), settled + 1);
}

}  // namespace
}  // namespace conv1d
