// HostPool over an ordinary heap region (no device needed): size classes,
// reuse of freed blocks, exhaustion, Contains, and concurrent use.
#include "server/backends/gpu/host_pool.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace conv1d::gpu {
namespace {

TEST(HostPool, BlocksAreAlignedDisjointAndReusedAfterFree) {
  std::vector<char> region(1 << 20);
  HostPool pool(region.data(), static_cast<int64_t>(region.size()));
  void* a = pool.Allocate(1);
  void* b = pool.Allocate(5000);  // 8 KiB class
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ((static_cast<char*>(a) - region.data()) % HostPool::kMinBlockBytes, 0);
  EXPECT_TRUE(pool.Contains(a, HostPool::kMinBlockBytes));
  EXPECT_TRUE(pool.Contains(b, 8192));
  EXPECT_GE(static_cast<char*>(b) - static_cast<char*>(a), HostPool::kMinBlockBytes);
  EXPECT_EQ(pool.bytes_in_use(), 4096 + 8192);
  pool.Free(b);
  EXPECT_EQ(pool.bytes_in_use(), 4096);
  EXPECT_EQ(pool.Allocate(8000), b);  // same class: the freed block again
  pool.Free(a);
  pool.Free(b);
  EXPECT_EQ(pool.bytes_in_use(), 0);
}

TEST(HostPool, ExhaustionReturnsNullAndContainsRejectsOutsidePointers) {
  std::vector<char> region(64 << 10);
  HostPool pool(region.data(), static_cast<int64_t>(region.size()));
  EXPECT_EQ(pool.Allocate(128 << 10), nullptr);  // larger than the region
  std::vector<void*> got;
  while (void* p = pool.Allocate(16 << 10)) got.push_back(p);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(pool.Allocate(1), nullptr);  // nothing left to carve
  int on_stack = 0;
  EXPECT_FALSE(pool.Contains(&on_stack, sizeof on_stack));
  EXPECT_FALSE(pool.Contains(region.data() + region.size() - 8, 16));  // runs past the end
  EXPECT_EQ(pool.Allocate(0), nullptr);
  for (void* p : got) pool.Free(p);
  EXPECT_NE(pool.Allocate(16 << 10), nullptr);
  // The 128 KiB, the 16 KiB after the fourth and the 1-byte requests found
  // no room; a size of 0 is no request at all.
  EXPECT_EQ(pool.misses(), 3);
}

// The listener hears the bytes in use after every change, in order, so a
// gauge it sets ends at the pool's true figure.
TEST(HostPool, UseListenerSeesEveryChange) {
  std::vector<char> region(1 << 20);
  std::vector<int64_t> heard;
  HostPool pool(region.data(), static_cast<int64_t>(region.size()),
                [&heard](int64_t in_use) { heard.push_back(in_use); });
  void* a = pool.Allocate(100);     // 4 KiB class
  void* b = pool.Allocate(20000);   // 32 KiB class
  pool.Free(a);
  EXPECT_EQ(pool.Allocate(2 << 20), nullptr);  // a miss changes nothing
  pool.Free(b);
  EXPECT_EQ(heard, (std::vector<int64_t>{4096, 4096 + 32768, 32768, 0}));
  EXPECT_EQ(pool.misses(), 1);
}

TEST(HostPool, ConcurrentAllocateAndFreeNeverHandOutABlockTwice) {
  std::vector<char> region(8 << 20);
  HostPool pool(region.data(), static_cast<int64_t>(region.size()));
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int it = 0; it < 2000; ++it) {
        const int64_t bytes = 4096 << ((it + t) % 5);
        char* p = static_cast<char*>(pool.Allocate(bytes));
        if (p == nullptr) continue;
        std::memset(p, t, bytes);  // a block shared with another thread would be overwritten
        for (int64_t i = 0; i < bytes; i += 512) failures[t] += p[i] != static_cast<char>(t);
        pool.Free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
  EXPECT_EQ(pool.bytes_in_use(), 0);
}

}  // namespace
}  // namespace conv1d::gpu
