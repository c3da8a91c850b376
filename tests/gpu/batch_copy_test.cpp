// Tests of kernels::BatchCopyRun/BatchCopyAppend: ranges of every size class
// and alignment gathered from page-locked host memory into device memory and
// scattered back; bytes outside the ranges must stay untouched. Skips itself
// without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/batch_copy.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::BatchCopyChunk;

constexpr int64_t kBytes = int64_t{4} << 20;
constexpr uint8_t kPoison = 0xAB;

struct Range {
  int64_t src, dst, bytes;
};

// Non-overlapping ranges with sizes around the 16-byte and chunk
// boundaries, some with misaligned source or destination offsets.
std::vector<Range> MakeRanges(std::mt19937_64& rng) {
  const int64_t sizes[] = {1, 15, 16, 17, 4095, 16384, 16385, 100000, 300000, 65536};
  std::vector<Range> ranges;
  int64_t src = 0, dst = 0;
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t n : sizes) {
      const int64_t skew_src = rng() % 2 ? 0 : 1 + rng() % 15;
      const int64_t skew_dst = rng() % 2 ? 0 : 1 + rng() % 15;
      src = (src + 15) / 16 * 16 + skew_src + 64;
      dst = (dst + 15) / 16 * 16 + skew_dst + 64;
      ranges.push_back({src, dst, n});
      src += n;
      dst += n;
    }
  }
  EXPECT_LT(src, kBytes);
  EXPECT_LT(dst, kBytes);
  return ranges;
}

class BatchCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_DEVICE();
    ASSERT_EQ(hipHostMalloc(reinterpret_cast<void**>(&host_), kBytes,
                            hipHostMallocMapped | hipHostMallocPortable),
              hipSuccess);
    ASSERT_EQ(hipHostMalloc(reinterpret_cast<void**>(&table_), kTableEntries * sizeof(BatchCopyChunk),
                            hipHostMallocMapped | hipHostMallocPortable),
              hipSuccess);
    ASSERT_EQ(hipMalloc(reinterpret_cast<void**>(&device_), kBytes), hipSuccess);
    ASSERT_EQ(hipStreamCreate(&stream_), hipSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)hipStreamDestroy(stream_);
    if (device_ != nullptr) (void)hipFree(device_);
    if (table_ != nullptr) (void)hipHostFree(table_);
    if (host_ != nullptr) (void)hipHostFree(host_);
  }
  // The table and host buffer as the device addresses them.
  template <class T>
  T* DeviceView(T* p) {
    void* view = nullptr;
    EXPECT_EQ(hipHostGetDevicePointer(&view, p, 0), hipSuccess);
    return static_cast<T*>(view);
  }

  static constexpr int32_t kTableEntries = 1024;
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
  BatchCopyChunk* table_ = nullptr;
  hipStream_t stream_ = nullptr;
};

TEST_F(BatchCopyTest, GathersHostRangesIntoDeviceAndLeavesTheRestAlone) {
  std::mt19937_64 rng(11);
  for (int64_t i = 0; i < kBytes; ++i) host_[i] = static_cast<uint8_t>(rng());
  ASSERT_EQ(hipMemset(device_, kPoison, kBytes), hipSuccess);
  const std::vector<Range> ranges = MakeRanges(rng);
  uint8_t* host_view = DeviceView(host_);
  int32_t count = 0;
  for (const Range& r : ranges) {
    ASSERT_TRUE(kernels::BatchCopyAppend(table_, kTableEntries, &count, host_view + r.src,
                                         device_ + r.dst, r.bytes));
  }
  ASSERT_EQ(kernels::BatchCopyRun(DeviceView(table_), count, stream_), hipSuccess);
  ASSERT_EQ(hipStreamSynchronize(stream_), hipSuccess);
  std::vector<uint8_t> got(kBytes);
  ASSERT_EQ(hipMemcpy(got.data(), device_, kBytes, hipMemcpyDeviceToHost), hipSuccess);
  std::vector<uint8_t> want(kBytes, kPoison);
  for (const Range& r : ranges) std::memcpy(want.data() + r.dst, host_ + r.src, r.bytes);
  for (int64_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(got[i], want[i]) << "device byte " << i;
  }
}

TEST_F(BatchCopyTest, ScattersDeviceRangesIntoHostAndLeavesTheRestAlone) {
  std::mt19937_64 rng(12);
  std::vector<uint8_t> source(kBytes);
  for (auto& b : source) b = static_cast<uint8_t>(rng());
  ASSERT_EQ(hipMemcpy(device_, source.data(), kBytes, hipMemcpyHostToDevice), hipSuccess);
  std::memset(host_, kPoison, kBytes);
  const std::vector<Range> ranges = MakeRanges(rng);
  uint8_t* host_view = DeviceView(host_);
  int32_t count = 0;
  for (const Range& r : ranges) {
    // Device offsets are the source here, host offsets the destination.
    ASSERT_TRUE(kernels::BatchCopyAppend(table_, kTableEntries, &count, device_ + r.dst,
                                         host_view + r.src, r.bytes));
  }
  ASSERT_EQ(kernels::BatchCopyRun(DeviceView(table_), count, stream_), hipSuccess);
  ASSERT_EQ(hipStreamSynchronize(stream_), hipSuccess);
  std::vector<uint8_t> want(kBytes, kPoison);
  for (const Range& r : ranges) std::memcpy(want.data() + r.src, source.data() + r.dst, r.bytes);
  for (int64_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(host_[i], want[i]) << "host byte " << i;
  }
}

TEST(BatchCopyAppendTest, CutsRangesIntoChunksAndRefusesWhatDoesNotFit) {
  std::vector<BatchCopyChunk> table(4);
  int32_t count = 0;
  std::vector<char> src_bytes(3 * kernels::kBatchCopyChunkBytes),
      dst_bytes(3 * kernels::kBatchCopyChunkBytes);
  const char* src = src_bytes.data();
  char* dst = dst_bytes.data();
  const int64_t two_chunks = kernels::kBatchCopyChunkBytes + 1;
  ASSERT_TRUE(kernels::BatchCopyAppend(table.data(), 4, &count, src, dst, two_chunks));
  ASSERT_EQ(count, 2);
  EXPECT_EQ(table[0].bytes, kernels::kBatchCopyChunkBytes);
  EXPECT_EQ(table[1].bytes, 1);
  EXPECT_EQ(static_cast<const char*>(table[1].src), src + kernels::kBatchCopyChunkBytes);
  EXPECT_EQ(static_cast<char*>(table[1].dst), dst + kernels::kBatchCopyChunkBytes);
  // Three more chunks do not fit in the two entries left: nothing appended.
  EXPECT_FALSE(kernels::BatchCopyAppend(table.data(), 4, &count, src, dst,
                                        2 * kernels::kBatchCopyChunkBytes + 1));
  EXPECT_EQ(count, 2);
  EXPECT_TRUE(kernels::BatchCopyAppend(table.data(), 4, &count, src, dst, 0));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(kernels::BatchCopyChunksFor(0), 0);
  EXPECT_EQ(kernels::BatchCopyChunksFor(two_chunks), 2);
}

TEST(BatchCopyRunTest, RejectsBadArgumentsAndAcceptsAnEmptyTable) {
  REQUIRE_DEVICE();
  EXPECT_EQ(kernels::BatchCopyRun(nullptr, 0, nullptr), hipSuccess);
  EXPECT_EQ(kernels::BatchCopyRun(nullptr, 3, nullptr), hipErrorInvalidValue);
  EXPECT_EQ(kernels::BatchCopyRun(nullptr, -1, nullptr), hipErrorInvalidValue);
}

}  // namespace
}  // namespace conv1d::testing
