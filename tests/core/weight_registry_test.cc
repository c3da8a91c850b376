// WeightRegistry: registration, lookup, replacement, removal, every error
// with the field it names, lifetime of sets held across removal, and a
// concurrent register/lookup stress.
#include "server/core/weight_registry.h"

#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/core/scheduler_test_util.h"

namespace conv1d {
namespace {

using ::conv1d::testing::RecordingObserver;

// Random bytes (never all zero) so views can be checked against them.
std::string RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(static_cast<size_t>(n), '\0');
  for (char& c : s) c = static_cast<char>(rng() % 255 + 1);
  return s;
}

TEST(WeightRegistryTest, RegisterLookupListAndViews) {
  RecordingObserver observer;
  WeightRegistry reg(&observer);
  const std::string w = RandomBytes(16 * 4 * 2, 1);
  const std::string b = RandomBytes(16 * 2, 2);
  auto set = reg.Register("mamba/layer.0_conv-1", DType::kBF16, 16, 4, w, b,
                          /*replace=*/false);
  ASSERT_TRUE(set.ok()) << set.status();
  const WeightSet& s = **set;
  EXPECT_EQ(s.name, "mamba/layer.0_conv-1");
  EXPECT_EQ(s.dtype, DType::kBF16);
  EXPECT_EQ(s.dim, 16);
  EXPECT_EQ(s.width, 4);
  EXPECT_TRUE(s.has_bias);
  EXPECT_EQ(s.bytes(), 16 * 4 * 2 + 16 * 2);
  EXPECT_GT(s.footprint_bytes(), s.bytes() + static_cast<int64_t>(sizeof(WeightSet)));
  EXPECT_EQ(reg.total_bytes(), s.footprint_bytes());

  const TensorView wv = s.weight();
  EXPECT_EQ(wv.dtype, DType::kBF16);
  EXPECT_EQ(wv.shape, (Shape{16, 4}));
  ASSERT_EQ(wv.bytes, static_cast<int64_t>(w.size()));
  EXPECT_EQ(std::memcmp(wv.data, w.data(), w.size()), 0);
  EXPECT_EQ(wv.owner.get(), static_cast<const void*>(&s));
  EXPECT_NE(s.id, 0u);
  EXPECT_EQ(wv.cache_id, s.id);
  const TensorView bv = s.bias();
  EXPECT_EQ(bv.shape, (Shape{16}));
  ASSERT_EQ(bv.bytes, static_cast<int64_t>(b.size()));
  EXPECT_EQ(std::memcmp(bv.data, b.data(), b.size()), 0);
  EXPECT_EQ(bv.cache_id, s.id);
  EXPECT_EQ(bv.owner.get(), static_cast<const void*>(&s));

  auto found = reg.Lookup("mamba/layer.0_conv-1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), set->get());

  auto nobias = reg.Register("a", DType::kF32, 3, 2, RandomBytes(24, 3),
                             absl::nullopt, false);
  ASSERT_TRUE(nobias.ok());
  EXPECT_FALSE((*nobias)->has_bias);
  EXPECT_FALSE((*nobias)->bias().present());
  EXPECT_NE((*nobias)->id, (*set)->id);

  const auto list = reg.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "a");
  EXPECT_EQ(list[1]->name, "mamba/layer.0_conv-1");
  EXPECT_EQ(observer.weights().back(),
            (std::pair<int64_t, int64_t>{2, s.footprint_bytes() +
                                                (*nobias)->footprint_bytes()}));
}

TEST(WeightRegistryTest, ReplaceAndUnregister) {
  RecordingObserver observer;
  WeightRegistry reg(&observer);
  auto first = reg.Register("m", DType::kF32, 4, 3, RandomBytes(48, 1),
                            absl::nullopt, false);
  ASSERT_TRUE(first.ok());
  auto dup = reg.Register("m", DType::kF32, 4, 3, RandomBytes(48, 2),
                          absl::nullopt, false);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("'m'"), absl::string_view::npos);

  auto second = reg.Register("m", DType::kF16, 8, 2, RandomBytes(32, 3),
                             RandomBytes(16, 4), /*replace=*/true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*second)->id, (*first)->id);
  EXPECT_EQ(reg.Lookup("m").value().get(), second->get());
  const int64_t first_bytes = (*first)->footprint_bytes();
  const int64_t second_bytes = (*second)->footprint_bytes();
  EXPECT_EQ(reg.total_bytes(), second_bytes);
  EXPECT_EQ(reg.List().size(), 1u);

  EXPECT_TRUE(reg.Unregister("m").ok());
  EXPECT_EQ(reg.total_bytes(), 0);
  auto gone = reg.Lookup("m");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.status().message(), "no weights registered under 'm'");
  absl::Status again = reg.Unregister("m");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(again.message().find("'m'"), absl::string_view::npos);
  const auto events = observer.weights();
  EXPECT_EQ(events, (std::vector<std::pair<int64_t, int64_t>>{
                        {1, first_bytes}, {1, second_bytes}, {0, 0}}));
}

TEST(WeightRegistryTest, SetHeldAcrossUnregisterStaysValid) {
  WeightRegistry reg;
  const std::string w = RandomBytes(64 * 4 * 4, 9);
  auto set = reg.Register("held", DType::kF32, 64, 4, w, absl::nullopt, false);
  ASSERT_TRUE(set.ok());
  TensorView view = (*set)->weight();  // what a queued task keeps
  std::shared_ptr<const WeightSet> held = *set;
  set = absl::NotFoundError("dropped");
  ASSERT_TRUE(reg.Unregister("held").ok());
  ASSERT_TRUE(reg.Register("held", DType::kF32, 64, 4, RandomBytes(w.size(), 10),
                           absl::nullopt, true)
                  .ok());
  held.reset();
  // Only the view's owner keeps the old set alive now.
  EXPECT_EQ(std::memcmp(view.data, w.data(), w.size()), 0);
}

TEST(WeightRegistryTest, ErrorsNameTheField) {
  WeightRegistry reg;
  auto expect_invalid = [&](absl::StatusOr<std::shared_ptr<const WeightSet>> r,
                            const char* field) {
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().find(field), 0u) << r.status();
  };
  const std::string w12 = RandomBytes(12, 1);  // D=3, W=1, fp32
  expect_invalid(reg.Register("", DType::kF32, 3, 1, w12, absl::nullopt, false),
                 "name");
  expect_invalid(reg.Register(std::string(129, 'a'), DType::kF32, 3, 1, w12,
                              absl::nullopt, false),
                 "name");
  EXPECT_TRUE(reg.Register(std::string(128, 'a'), DType::kF32, 3, 1, w12,
                           absl::nullopt, false)
                  .ok());
  for (const char* bad : {"a b", "a:b", "a\nb", "\xc3\xa9", "a*"}) {
    expect_invalid(
        reg.Register(bad, DType::kF32, 3, 1, w12, absl::nullopt, false),
        "name");
  }
  expect_invalid(reg.Register("w", DType::kF32, 3, 0, w12, absl::nullopt, false),
                 "width");
  expect_invalid(
      reg.Register("w", DType::kF32, 3, kMaxWidth + 1, w12, absl::nullopt, false),
      "width");
  expect_invalid(reg.Register("d", DType::kF32, 0, 1, "", absl::nullopt, false),
                 "dim");
  expect_invalid(
      reg.Register("d", DType::kF32, int64_t{1} << 62, 1, w12, absl::nullopt,
                   false),
      "dim");
  expect_invalid(reg.Register("x", DType::kF16, 3, 1, w12, absl::nullopt, false),
                 "weight");
  expect_invalid(reg.Register("x", DType::kF32, 3, 1, w12, RandomBytes(6, 2),
                              false),
                 "bias");
  expect_invalid(reg.Register("x", DType::kF32, 3, 1, w12, std::string(), false),
                 "bias");
  EXPECT_TRUE(
      reg.Register("x", DType::kF32, 3, 1, w12, RandomBytes(12, 2), false).ok());
}

TEST(WeightRegistryTest, TotalBytesLimit) {
  // The limit leaves room for "a" and less than a second set's bookkeeping.
  WeightRegistry probe;
  const int64_t a_bytes = probe.Register("a", DType::kF32, 5, 4, RandomBytes(80, 1),
                                         absl::nullopt, false)
                              .value()
                              ->footprint_bytes();
  const int64_t limit = a_bytes + 100;
  WeightRegistry reg(nullptr, limit);
  ASSERT_TRUE(reg.Register("a", DType::kF32, 5, 4, RandomBytes(80, 1),
                           absl::nullopt, false)
                  .ok());
  // 24 bytes of data fit in the 100 left; the set's bookkeeping does not.
  auto over = reg.Register("b", DType::kF32, 6, 1, RandomBytes(24, 2),
                           absl::nullopt, false);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find(std::to_string(limit)),
            absl::string_view::npos);
  EXPECT_FALSE(reg.Lookup("b").ok());
  // Replacing frees the old set's bytes first.
  auto replaced = reg.Register("a", DType::kF32, 5, 5, RandomBytes(100, 3),
                               absl::nullopt, true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(reg.total_bytes(), (*replaced)->footprint_bytes());
}

// The budget counts what sets really take: many tiny sets (2 bytes of data
// each, about 600 in memory) against the heap growth malloc itself reports.
TEST(WeightRegistryTest, FootprintMatchesTheHeapItTakes) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's allocator does not report mallinfo2";
#elif defined(__GLIBC__)
  constexpr int kSets = 20000;
  WeightRegistry reg;
  const std::string w = RandomBytes(2, 1);  // D=1, W=1, fp16
  std::vector<std::string> names;
  for (int i = 0; i < kSets; ++i) {
    names.push_back(i % 2 == 0 ? "s" + std::to_string(i)
                               : "a/longer/name/of/layer/" + std::to_string(i));
  }
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < kSets; ++i) {
    ASSERT_TRUE(reg.Register(names[i], DType::kF16, 1, 1, w, absl::nullopt, false).ok());
  }
  const double heap = static_cast<double>(mallinfo2().uordblks - before);
  const double counted = static_cast<double>(reg.total_bytes());
  const double data = 2.0 * kSets;
  std::printf("%d sets: heap %.0f bytes, counted %.0f, data %.0f\n", kSets, heap,
              counted, data);
  EXPECT_GT(heap, 100 * data);  // the overhead is real ...
  EXPECT_GT(counted, 0.9 * heap);  // ... and counted
  EXPECT_LT(counted, 1.25 * heap);
#else
  GTEST_SKIP() << "needs glibc's mallinfo2";
#endif
}

TEST(WeightRegistryTest, ConcurrentRegisterLookupUnregister) {
  WeightRegistry reg;
  constexpr int kWriters = 4, kReaders = 4, kOps = 500, kNames = 8;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  CONV1D_TEST_SEED_SCOPE(test_seed, 0);
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(test_seed + t));
      for (int i = 0; i < kOps; ++i) {
        const std::string name = "w" + std::to_string(rng() % kNames);
        if (rng() % 4 == 0) {
          (void)reg.Unregister(name);
        } else {
          const int64_t dim = rng() % 32 + 1;
          const int32_t width = rng() % 4 + 1;
          // Each byte encodes dim, so readers can check a set is whole.
          ASSERT_TRUE(reg.Register(name, DType::kF32, dim, width,
                                   std::string(dim * width * 4, char(dim)),
                                   std::string(dim * 4, char(dim)), true)
                          .ok());
        }
      }
    });
  }
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(test_seed + 100 + t));
      while (!stop.load()) {
        auto r = reg.Lookup("w" + std::to_string(rng() % kNames));
        if (!r.ok()) {
          ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
          continue;
        }
        const WeightSet& s = **r;
        ASSERT_EQ(s.weight().bytes, s.dim * s.width * 4);
        for (char c : s.weight_bytes) ASSERT_EQ(c, char(s.dim));
        for (const auto& listed : reg.List()) ASSERT_GT(listed->bytes(), 0);
      }
    });
  }
  for (int t = 0; t < kWriters; ++t) threads[t].join();
  stop = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  int64_t sum = 0;
  for (const auto& s : reg.List()) sum += s->footprint_bytes();
  EXPECT_EQ(reg.total_bytes(), sum);
}

}  // namespace
}  // namespace conv1d
