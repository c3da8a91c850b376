// Test helpers of the GPU shared-memory suites (tests/gpu_e2e): the real
// conv1d_server on the GPU backend as a child process (one per suite, on
// device 0), a registered device region of this process, and RegionLayout,
// which moves a conv1d.v1 request's tensors into a region and reads its
// outputs back so that the common checks (tests/e2e/e2e_util.h) compare
// them with the CPU reference.
// Not thread-safe: each test owns its layouts.
#ifndef CONV1D_TESTS_GPU_E2E_GPU_E2E_UTIL_H_
#define CONV1D_TESTS_GPU_E2E_GPU_E2E_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/device_region.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/server_process.h"

namespace conv1d::e2e {

inline constexpr int64_t kRegionBytes = int64_t{64} << 20;
inline constexpr int64_t kAlignBytes = 256;

// product(shape) * sizeof(dtype) of a wire tensor.
int64_t TensorBytes(const v1::Tensor& t);
int64_t Elems(std::initializer_list<int64_t> dims);

// Hands out aligned ranges of one registered region, and moves request
// tensors into it.
class RegionLayout {
 public:
  RegionLayout(DeviceRegion* region, std::string name)
      : region_(region), name_(std::move(name)) {}
  // `bytes` more bytes of the region (256-byte aligned); its offset.
  int64_t Reserve(int64_t bytes);
  // Every Tensor of `m` (and of its InlineWeights) with bytes goes into the
  // region: its data is cleared and shared_memory names the place.
  void PlaceInputs(google::protobuf::Message* m);
  // output_shared_memory[field] = a fresh range of `bytes` (poisoned).
  void PlaceOutput(google::protobuf::Message* request, const std::string& field,
                   int64_t bytes);
  // Response tensors written into the region get their bytes back as data.
  // Returns how many there were.
  int FetchOutputs(google::protobuf::Message* response);

 private:
  DeviceRegion* region_;
  std::string name_;
  int64_t next_ = 0;
};

// The server on the GPU backend (skips without a device), and a 64 MiB
// device region of this process registered as "dev".
class GpuServerTest : public ::testing::Test {
 protected:
  // Starts the server once for the suite when a device is visible.
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  // Skips without a device; makes the stubs and registers region_.
  void SetUp() override;

  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  std::unique_ptr<v1::Conv1d::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
  std::unique_ptr<DeviceRegion> region_;
};

// Runs `c` with every input, inline weight and output in `region` (named
// "dev"); "" when every output matches the CPU reference.
std::string RunInDeviceMemory(v1::Conv1d::Stub* stub, DeviceRegion* region, const Case& c,
                              Rng* rng);

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_GPU_E2E_GPU_E2E_UTIL_H_
