// os_random: the system generator fills whole buffers with bytes that look
// uniform and differ between calls; the device fallback reads exactly the
// file's bytes, and fails UNAVAILABLE naming the path for a missing or short
// file.
#include "server/core/os_random.h"

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace conv1d {
namespace {

TEST(OsRandomTest, FillsEveryByteUniformlyAndDiffersBetweenCalls) {
  std::vector<uint8_t> a(1 << 16), b(1 << 16);
  ASSERT_TRUE(FillOsRandom(absl::MakeSpan(a)).ok());
  ASSERT_TRUE(FillOsRandom(absl::MakeSpan(b)).ok());
  EXPECT_NE(a, b);
  // 65536 bytes: each value about 256 times (standard deviation 16).
  std::array<int, 256> counts{};
  for (uint8_t v : a) ++counts[v];
  for (int v = 0; v < 256; ++v) {
    EXPECT_GT(counts[v], 128) << "byte value " << v;
    EXPECT_LT(counts[v], 384) << "byte value " << v;
  }
  // The last bytes are written too, not left as they were.
  std::vector<uint8_t> tail(4096, 0);
  ASSERT_TRUE(FillOsRandom(absl::MakeSpan(tail)).ok());
  int zeros = 0;
  for (size_t i = tail.size() - 64; i < tail.size(); ++i) zeros += tail[i] == 0;
  EXPECT_LT(zeros, 16);
  EXPECT_TRUE(FillOsRandom(absl::Span<uint8_t>()).ok());
}

class RandomDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
            "/os_random_test_XXXXXX";
    const int fd = mkstemp(path_.data());
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 1000; ++i) content_.push_back(static_cast<uint8_t>(i * 7 + 3));
    ASSERT_EQ(write(fd, content_.data(), content_.size()),
              static_cast<ssize_t>(content_.size()));
    close(fd);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  std::vector<uint8_t> content_;
};

TEST_F(RandomDeviceTest, ReadsTheFilesBytes) {
  std::vector<uint8_t> got(content_.size(), 0);
  ASSERT_TRUE(FillFromRandomDevice(path_.c_str(), absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, content_);
}

TEST_F(RandomDeviceTest, AShortFileIsUnavailable) {
  std::vector<uint8_t> got(content_.size() + 1);
  const absl::Status s = FillFromRandomDevice(path_.c_str(), absl::MakeSpan(got));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(path_), std::string::npos) << s;
}

TEST_F(RandomDeviceTest, AMissingFileIsUnavailable) {
  const std::string missing = path_ + ".missing";
  std::vector<uint8_t> got(16);
  const absl::Status s = FillFromRandomDevice(missing.c_str(), absl::MakeSpan(got));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
}

TEST(RandomDeviceDevUrandomTest, FillsFromDevUrandom) {
  std::vector<uint8_t> a(4096, 0), b(4096, 0);
  ASSERT_TRUE(FillFromRandomDevice("/dev/urandom", absl::MakeSpan(a)).ok());
  ASSERT_TRUE(FillFromRandomDevice("/dev/urandom", absl::MakeSpan(b)).ok());
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace conv1d
