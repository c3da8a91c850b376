// SharedMemoryRegistry's device regions (RegisterDevice) against a fake
// DeviceMemoryImporter that hands out host bytes as "device memory" and
// records every open and close: handle and size checks, bounds on every
// Resolve, the in-use rule, closing only after the last request lets go,
// one namespace with system regions, and the refusal without an importer.
// Also the pin-failure path of system regions (pin_error in Status).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/shm_registry.h"

namespace conv1d {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHandleBytes = 64;

// "Exports" allocations of host memory: a handle is the allocation's index
// in its first byte, the rest zero. Opens only on device 0.
class FakeImporter final : public DeviceMemoryImporter {
 public:
  // Returns the handle of a new allocation of `bytes` bytes.
  std::string Export(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    allocations_.push_back(std::vector<char>(static_cast<size_t>(bytes)));
    std::string handle(kHandleBytes, '\0');
    handle[0] = static_cast<char>(allocations_.size() - 1);
    return handle;
  }
  char* memory(int index) {
    absl::MutexLock lock(&mu_);
    return allocations_[index].data();
  }

  int64_t handle_bytes() const override { return kHandleBytes; }
  absl::StatusOr<ImportedDeviceMemory> Open(absl::string_view handle,
                                            int32_t device) override {
    absl::MutexLock lock(&mu_);
    if (device != 0) return absl::InvalidArgumentError("device_id 7 is not a device");
    const size_t index = static_cast<unsigned char>(handle[0]);
    if (index >= allocations_.size()) return absl::FailedPreconditionError("refused handle");
    ++opened;
    return ImportedDeviceMemory{allocations_[index].data(),
                                static_cast<int64_t>(allocations_[index].size())};
  }
  void Close(void* address, int32_t device) override {
    absl::MutexLock lock(&mu_);
    closed.push_back(address);
  }

  int opened = 0;
  std::vector<void*> closed;

 private:
  absl::Mutex mu_;
  std::vector<std::vector<char>> allocations_;
};

std::unique_ptr<SharedMemoryRegistry> MakeRegistry(std::shared_ptr<FakeImporter> importer,
                                                   int32_t max_regions = 8) {
  SharedMemoryRegistryOptions options;
  options.max_regions = max_regions;
  options.importer = std::move(importer);
  absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> r =
      SharedMemoryRegistry::Create(options);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

TEST(DeviceRegions, SpansAreSharedDeviceMemoryInsideTheRegion) {
  auto importer = std::make_shared<FakeImporter>();
  const std::string handle = importer->Export(4096);
  auto reg = MakeRegistry(importer);
  ASSERT_TRUE(reg->serves_device_regions());
  ASSERT_TRUE(reg->RegisterDevice("d", handle, 0, 3000).ok());
  EXPECT_EQ(importer->opened, 1);

  absl::StatusOr<SharedSpan> span = reg->Resolve("d", 100, 400, "input 'x'");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->where.kind, MemoryKind::kSharedDevice);
  EXPECT_TRUE(span->where.on_device());
  EXPECT_EQ(span->where.device, 0);
  EXPECT_EQ(span->where.offset, 100);
  EXPECT_NE(span->where.region, 0u);
  EXPECT_EQ(span->data.get(), importer->memory(0) + 100);
  EXPECT_EQ(span->bytes, 400);

  absl::StatusOr<std::vector<SharedRegionInfo>> status = reg->Status("", RegionType::kDevice);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].type, RegionType::kDevice);
  EXPECT_EQ((*status)[0].device_id, 0);
  EXPECT_EQ((*status)[0].byte_size, 3000);
  EXPECT_EQ((*status)[0].raw_handle, handle);
  EXPECT_EQ((*status)[0].in_use, 1);
  // System status lists only system regions.
  EXPECT_TRUE(reg->Status("")->empty());
  EXPECT_TRUE(absl::IsNotFound(reg->Status("d").status()));
}

TEST(DeviceRegions, BoundsAreCheckedAgainstTheRegionOnEveryResolve) {
  auto importer = std::make_shared<FakeImporter>();
  auto reg = MakeRegistry(importer);
  ASSERT_TRUE(reg->RegisterDevice("d", importer->Export(4096), 0, 1000).ok());
  for (auto [offset, bytes] : {std::pair<int64_t, int64_t>{0, 1001}, {990, 11}, {-1, 4},
                               {4, -1}, {INT64_MAX, 2}, {1000, 1}}) {
    absl::StatusOr<SharedSpan> span = reg->Resolve("d", offset, bytes, "output 'y'");
    EXPECT_TRUE(absl::IsInvalidArgument(span.status())) << offset << " " << bytes;
    EXPECT_THAT(span.status().message(), HasSubstr("output 'y'"));
    EXPECT_THAT(span.status().message(), HasSubstr("region \"d\" of 1000 bytes"));
  }
  EXPECT_TRUE(reg->Resolve("d", 990, 10, "x").ok());
  // The registered size bounds requests, not the (larger) allocation.
  EXPECT_TRUE(reg->Resolve("d", 0, 1000, "x").ok());
}

TEST(DeviceRegions, RegistrationChecksHandleDeviceAndSize) {
  auto importer = std::make_shared<FakeImporter>();
  const std::string handle = importer->Export(1024);
  auto reg = MakeRegistry(importer, 2);

  absl::Status short_handle = reg->RegisterDevice("d", "abc", 0, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(short_handle)) << short_handle;
  EXPECT_THAT(short_handle.message(), HasSubstr("raw_handle has 3 bytes, expected 64"));
  EXPECT_THAT(short_handle.message(), HasSubstr("region \"d\""));

  EXPECT_TRUE(absl::IsInvalidArgument(reg->RegisterDevice("d", handle, 0, 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(reg->RegisterDevice("", handle, 0, 16)));

  absl::Status bad_device = reg->RegisterDevice("d", handle, 7, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(bad_device)) << bad_device;
  EXPECT_THAT(bad_device.message(), HasSubstr("region \"d\": device_id 7"));

  std::string unknown(kHandleBytes, '\0');
  unknown[0] = 9;
  absl::Status refused = reg->RegisterDevice("d", unknown, 0, 16);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("region \"d\": refused handle"));

  // More than the exported allocation: refused, and the handle closed again.
  absl::Status too_big = reg->RegisterDevice("d", handle, 0, 1025);
  EXPECT_TRUE(absl::IsInvalidArgument(too_big)) << too_big;
  EXPECT_THAT(too_big.message(), HasSubstr("more than the 1024 bytes"));
  EXPECT_EQ(importer->opened, 1);
  EXPECT_EQ(importer->closed.size(), 1u);

  ASSERT_TRUE(reg->RegisterDevice("d", handle, 0, 1024).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(reg->RegisterDevice("d", handle, 0, 16)));
  ASSERT_TRUE(reg->RegisterDevice("e", handle, 0, 16).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(reg->RegisterDevice("f", handle, 0, 16)));
}

TEST(DeviceRegions, ClosedOnlyAfterTheLastRequestLetsGo) {
  auto importer = std::make_shared<FakeImporter>();
  auto reg = MakeRegistry(importer);
  ASSERT_TRUE(reg->RegisterDevice("d", importer->Export(256), 0, 256).ok());
  absl::StatusOr<SharedSpan> span = reg->Resolve("d", 0, 64, "input 'x'");
  ASSERT_TRUE(span.ok());

  absl::Status busy = reg->Unregister("d", RegionType::kDevice);
  EXPECT_TRUE(absl::IsFailedPrecondition(busy)) << busy;
  EXPECT_THAT(busy.message(), HasSubstr("\"d\" is in use by 1 in-flight request"));
  EXPECT_TRUE(importer->closed.empty());

  // The lease goes when the frontend answers; the memory stays open while a
  // lane may still hold the span's data.
  span->lease.reset();
  ASSERT_TRUE(reg->Unregister("d", RegionType::kDevice).ok());
  EXPECT_TRUE(importer->closed.empty());
  EXPECT_TRUE(absl::IsNotFound(reg->Resolve("d", 0, 1, "x").status()));
  span = absl::UnknownError("released");
  ASSERT_EQ(importer->closed.size(), 1u);
  EXPECT_EQ(importer->closed[0], importer->memory(0));
}

TEST(DeviceRegions, OneNamespaceWithSystemRegionsButSeparateCalls) {
  const std::string key = absl::StrCat("/conv1d_device_region_test_", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  auto importer = std::make_shared<FakeImporter>();
  auto reg = MakeRegistry(importer);
  ASSERT_TRUE(reg->Register("sys", key, 0, 4096).ok());
  ASSERT_TRUE(reg->RegisterDevice("dev", importer->Export(64), 0, 64).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(reg->RegisterDevice("sys", importer->Export(64), 0, 64)));
  EXPECT_TRUE(absl::IsAlreadyExists(reg->Register("dev", key, 0, 16)));

  // Each family unregisters only its own, by name or all at once.
  absl::Status wrong = reg->Unregister("dev");
  EXPECT_TRUE(absl::IsNotFound(wrong));
  EXPECT_THAT(wrong.message(), HasSubstr("system shared-memory region \"dev\""));
  EXPECT_TRUE(absl::IsNotFound(reg->Unregister("sys", RegionType::kDevice)));
  ASSERT_TRUE(reg->Unregister("", RegionType::kDevice).ok());
  EXPECT_EQ(importer->closed.size(), 1u);
  EXPECT_EQ(reg->Status("")->size(), 1u);
  ASSERT_TRUE(reg->Unregister("").ok());
  EXPECT_TRUE(reg->Status("")->empty());
  close(fd);
  shm_unlink(key.c_str());
}

TEST(DeviceRegions, RefusedWithoutAnImporter) {
  SharedMemoryRegistryOptions options;
  auto reg = *SharedMemoryRegistry::Create(options);
  EXPECT_FALSE(reg->serves_device_regions());
  absl::Status s = reg->RegisterDevice("g", std::string(kHandleBytes, '\0'), 0, 64);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("region \"g\": this server's backend cannot use device"));
  EXPECT_TRUE(reg->Status("", RegionType::kDevice)->empty());
}

TEST(DeviceRegions, RegistryGoneBeforeTheSpanStillClosesOnce) {
  auto importer = std::make_shared<FakeImporter>();
  absl::StatusOr<SharedSpan> span;
  {
    auto reg = MakeRegistry(importer);
    ASSERT_TRUE(reg->RegisterDevice("d", importer->Export(64), 0, 64).ok());
    span = reg->Resolve("d", 0, 64, "x");
    ASSERT_TRUE(span.ok());
  }
  EXPECT_TRUE(importer->closed.empty());
  span = absl::UnknownError("released");
  EXPECT_EQ(importer->closed.size(), 1u);
}

// Refuses every pin with a reason.
class RefusingPinner final : public HostMemoryPinner {
 public:
  absl::Status Pin(void*, int64_t) override {
    return absl::FailedPreconditionError("page-locking: not permitted");
  }
  void Unpin(void*) override { ADD_FAILURE() << "unpinned what was never pinned"; }
};

TEST(DeviceRegions, APinFailureIsReportedAndTheRegionStillServes) {
  const std::string key = absl::StrCat("/conv1d_device_region_pin_", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  SharedMemoryRegistryOptions options;
  options.pinner = std::make_shared<RefusingPinner>();
  auto reg = *SharedMemoryRegistry::Create(options);
  ASSERT_TRUE(reg->Register("p", key, 0, 4096).ok());
  const SharedRegionInfo info = (*reg->Status("p"))[0];
  EXPECT_FALSE(info.page_locked);
  EXPECT_EQ(info.pin_error, "page-locking: not permitted");
  absl::StatusOr<SharedSpan> span = reg->Resolve("p", 0, 16, "x");
  ASSERT_TRUE(span.ok());
  EXPECT_EQ(span->where.kind, MemoryKind::kHostHeap);
  span = absl::UnknownError("released");
  ASSERT_TRUE(reg->Unregister("p").ok());
  close(fd);
  shm_unlink(key.c_str());
}

}  // namespace
}  // namespace conv1d
