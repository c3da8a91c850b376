// The GPU backend's side of registered regions on a real device: the pinner
// page-locks mapped shared memory so that the device sees it at its host
// address, refuses memory it cannot lock (without breaking anything), and
// the importer refuses bad devices, bad handles and a handle of its own
// process with clear errors, after which the device still works. Label
// gpu: skips itself without a device.
#include "server/backends/gpu/shared_regions.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_runtime.h"

namespace conv1d::gpu {
namespace {

using ::testing::HasSubstr;

class SharedRegionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuBackend::VisibleDeviceCount() == 0) GTEST_SKIP() << "no GPU device";
  }
};

TEST_F(SharedRegionsTest, PinnedSharedMappingIsSeenAtItsHostAddress) {
  const size_t bytes = 3 << 20;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  GpuHostMemoryPinner pinner({0}, /*same_address=*/true);
  absl::Status st = pinner.Pin(map, static_cast<int64_t>(bytes));
  ASSERT_TRUE(st.ok()) << st;
  void* device_view = nullptr;
  ASSERT_EQ(hipHostGetDevicePointer(&device_view, map, 0), hipSuccess);
  EXPECT_EQ(device_view, map);
  // The device copies from and to it by DMA.
  std::memset(map, 0x5a, bytes);
  void* dev = nullptr;
  ASSERT_EQ(hipMalloc(&dev, bytes), hipSuccess);
  ASSERT_EQ(hipMemcpy(dev, map, bytes, hipMemcpyHostToDevice), hipSuccess);
  std::memset(map, 0, bytes);
  ASSERT_EQ(hipMemcpy(map, dev, bytes, hipMemcpyDeviceToHost), hipSuccess);
  EXPECT_EQ(static_cast<unsigned char*>(map)[bytes - 1], 0x5a);
  // Locking it again is refused, as an error, not a crash.
  absl::Status again = pinner.Pin(map, static_cast<int64_t>(bytes));
  EXPECT_TRUE(absl::IsFailedPrecondition(again)) << again;
  pinner.Unpin(map);
  (void)hipFree(dev);
  munmap(map, bytes);
}

TEST_F(SharedRegionsTest, ImporterRefusesBadInputAndItsOwnHandles) {
  GpuDeviceMemoryImporter importer({0});
  EXPECT_EQ(importer.handle_bytes(), static_cast<int64_t>(sizeof(hipIpcMemHandle_t)));
  void* dev = nullptr;
  ASSERT_EQ(hipSetDevice(0), hipSuccess);
  ASSERT_EQ(hipMalloc(&dev, 1 << 20), hipSuccess);
  hipIpcMemHandle_t handle;
  ASSERT_EQ(hipIpcGetMemHandle(&handle, dev), hipSuccess);
  const std::string bytes(reinterpret_cast<const char*>(&handle), sizeof(handle));

  absl::StatusOr<ImportedDeviceMemory> other_device = importer.Open(bytes, 5);
  EXPECT_TRUE(absl::IsInvalidArgument(other_device.status())) << other_device.status();
  EXPECT_THAT(other_device.status().message(), HasSubstr("device_id 5"));
  absl::StatusOr<ImportedDeviceMemory> short_handle = importer.Open("abc", 0);
  EXPECT_TRUE(absl::IsInvalidArgument(short_handle.status())) << short_handle.status();
  absl::StatusOr<ImportedDeviceMemory> junk = importer.Open(std::string(bytes.size(), 'x'), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(junk.status())) << junk.status();
  EXPECT_THAT(junk.status().message(), HasSubstr("cannot open the IPC handle"));
  // A handle of this very process: the runtime refuses it.
  absl::StatusOr<ImportedDeviceMemory> own = importer.Open(bytes, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(own.status())) << own.status();

  // None of it left an error behind: the device still works.
  EXPECT_EQ(hipGetLastError(), hipSuccess);
  EXPECT_EQ(hipMemset(dev, 1, 1 << 20), hipSuccess);
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
  void* base = nullptr;
  int64_t size = 0;
  ASSERT_EQ(AllocationRange(static_cast<char*>(dev) + 4096, &base, &size), hipSuccess);
  EXPECT_EQ(base, dev);
  EXPECT_GE(size, 1 << 20);
  (void)hipFree(dev);
}

TEST_F(SharedRegionsTest, AnUnusableDeviceIsAClearError) {
  // Device 64 is on the importer's list but not in the machine.
  GpuDeviceMemoryImporter importer({0, 64});
  absl::StatusOr<ImportedDeviceMemory> r =
      importer.Open(std::string(sizeof(hipIpcMemHandle_t), '\0'), 64);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("cannot open the IPC handle on device 64"));
  EXPECT_EQ(hipSetDevice(0), hipSuccess);
}

}  // namespace
}  // namespace conv1d::gpu
