// Shared memory against the real conv1d_server on the GPU backend, driven
// from this separate process (an IPC handle cannot be opened by the process
// that made it):
//   - device regions: this process allocates device memory (DeviceRegion),
//     registers it with CudaSharedMemoryRegister, and runs random forward,
//     backward and update requests of every dtype pair, layout and width
//     whose inputs, inline weights and outputs all live in it; every output
//     is read back from device memory and compared with the CPU reference.
//     Also the inference protocol's ModelInfer with region parameters, the
//     status and unregister calls, and the errors (bounds, unregistered
//     names, bad handles, sizes past the allocation, unknown devices).
//   - system regions: page-locked by the server at registration and moved
//     by DMA or the copy kernels; values against the CPU reference.
//   - the throughput of large-fwd at 8 clients with its tensors in gRPC
//     messages and in a device region (printed; checked for correctness).
// Skips itself where no GPU is visible. Seeds: CONV1D_TEST_SEED.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/device_region.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "kernels/gpu_compat.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/server_process.h"

namespace conv1d::e2e {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using ::testing::HasSubstr;

constexpr int64_t kRegionBytes = int64_t{64} << 20;
constexpr int64_t kAlignBytes = 256;

int64_t WireDTypeSize(v1::DType d) { return d == v1::FP32 ? 4 : 2; }

int64_t TensorBytes(const v1::Tensor& t) {
  int64_t n = WireDTypeSize(t.dtype());
  for (int64_t s : t.shape()) n *= s;
  return n;
}

bool IsTensor(const FieldDescriptor* f) {
  return f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() &&
         f->message_type() == v1::Tensor::descriptor();
}

// Hands out aligned ranges of one registered region, and moves request
// tensors into it.
class RegionLayout {
 public:
  RegionLayout(DeviceRegion* region, std::string name)
      : region_(region), name_(std::move(name)) {}

  int64_t Reserve(int64_t bytes) {
    const int64_t at = next_;
    next_ += (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    EXPECT_LE(next_, region_->byte_size());
    return at;
  }

  // Every Tensor of `m` (and of its InlineWeights) with bytes goes into the
  // region: its data is cleared and shared_memory names the place.
  void PlaceInputs(Message* m) {
    const google::protobuf::Reflection* r = m->GetReflection();
    for (int i = 0; i < m->GetDescriptor()->field_count(); ++i) {
      const FieldDescriptor* f = m->GetDescriptor()->field(i);
      if (f->type() != FieldDescriptor::TYPE_MESSAGE || f->is_repeated() ||
          !r->HasField(*m, f)) {
        continue;
      }
      if (IsTensor(f)) {
        auto* t = static_cast<v1::Tensor*>(r->MutableMessage(m, f));
        if (t->data().empty()) continue;
        const int64_t at = Reserve(static_cast<int64_t>(t->data().size()));
        ASSERT_TRUE(region_->Write(at, t->data().data(), t->data().size()).ok());
        t->clear_data();
        t->mutable_shared_memory()->set_region(name_);
        t->mutable_shared_memory()->set_offset(at);
      } else if (f->message_type() == v1::InlineWeights::descriptor()) {
        PlaceInputs(r->MutableMessage(m, f));
      }
    }
  }

  // output_shared_memory[name] = a fresh range of `bytes` (poisoned).
  void PlaceOutput(Message* request, const std::string& field, int64_t bytes) {
    if (bytes == 0) return;
    const int64_t at = Reserve(bytes);
    ASSERT_TRUE(region_->Fill(at, 0x7f, bytes).ok());
    const FieldDescriptor* f =
        request->GetDescriptor()->FindFieldByName("output_shared_memory");
    Message* entry = request->GetReflection()->AddMessage(request, f);
    const google::protobuf::Descriptor* ed = entry->GetDescriptor();
    entry->GetReflection()->SetString(entry, ed->FindFieldByNumber(1), field);
    auto* ref = static_cast<v1::SharedMemoryRef*>(
        entry->GetReflection()->MutableMessage(entry, ed->FindFieldByNumber(2)));
    ref->set_region(name_);
    ref->set_offset(at);
  }

  // Response tensors written into the region get their bytes back as data,
  // so that the common checks compare them. Returns how many there were.
  int FetchOutputs(Message* response) {
    int fetched = 0;
    const google::protobuf::Reflection* r = response->GetReflection();
    for (int i = 0; i < response->GetDescriptor()->field_count(); ++i) {
      const FieldDescriptor* f = response->GetDescriptor()->field(i);
      if (!IsTensor(f) || !r->HasField(*response, f)) continue;
      auto* t = static_cast<v1::Tensor*>(r->MutableMessage(response, f));
      if (!t->has_shared_memory()) continue;
      EXPECT_TRUE(t->data().empty()) << f->name() << " came back with bytes too";
      EXPECT_EQ(t->shared_memory().region(), name_);
      std::string bytes(static_cast<size_t>(TensorBytes(*t)), '\0');
      EXPECT_TRUE(region_->Read(t->shared_memory().offset(), bytes.data(),
                                static_cast<int64_t>(bytes.size())).ok());
      t->set_data(bytes);
      t->clear_shared_memory();
      ++fetched;
    }
    return fetched;
  }

 private:
  DeviceRegion* region_;
  std::string name_;
  int64_t next_ = 0;
};

int64_t Elems(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

class DeviceRegionE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int devices = 0;
    if (hipGetDeviceCount(&devices) != hipSuccess || devices == 0) {
      (void)hipGetLastError();
      return;
    }
    server_ = new ServerProcess({"--listen=127.0.0.1:0", "--metrics_listen=",
                                 "--backend=gpu", "--devices=0", "--lanes=2"});
    if (!server_->started() || server_->WaitForPort(absl::Seconds(60)) == 0) return;
    channel_ = new std::shared_ptr<grpc::Channel>(
        MakeChannel(absl::StrCat("127.0.0.1:", server_->Port())));
  }
  static void TearDownTestSuite() {
    delete channel_;
    channel_ = nullptr;
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "no GPU device is visible";
    ASSERT_NE(channel_, nullptr) << server_->Log();
    stub_ = v1::Conv1d::NewStub(*channel_);
    oip_ = inference::GRPCInferenceService::NewStub(*channel_);
    absl::StatusOr<std::unique_ptr<DeviceRegion>> region =
        DeviceRegion::Create({.device = 0, .byte_size = kRegionBytes});
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    absl::Status st = region_->Register(*channel_, "dev");
    ASSERT_TRUE(st.ok()) << st << "\n" << server_->Log();
  }

  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  std::unique_ptr<v1::Conv1d::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
  std::unique_ptr<DeviceRegion> region_;
};

ServerProcess* DeviceRegionE2E::server_ = nullptr;
std::shared_ptr<grpc::Channel>* DeviceRegionE2E::channel_ = nullptr;

// Runs `c` with everything in the device region; "" when it matches.
std::string RunInDeviceMemory(v1::Conv1d::Stub* stub, DeviceRegion* region, const Case& c,
                              Rng* rng) {
  RegionLayout layout(region, "dev");
  const Inputs in = MakeInputs(c, rng);
  const int64_t xs = c.x_dtype == DType::kF32 ? 4 : 2;
  const int64_t gs = c.grad_fp32 || c.w_dtype == DType::kF32 ? 4 : 2;
  const int64_t x_bytes = Elems({c.batch, c.dim, c.seqlen}) * xs;
  const int64_t state_bytes = Elems({c.batch, c.dim, c.width - 1}) * xs;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status st;
  std::string errors;
  int fetched = 0, placed = 0;
  if (c.op == Op::kForward) {
    v1::ForwardRequest q = MakeForward(c, in);
    layout.PlaceInputs(&q);
    layout.PlaceOutput(&q, "y", x_bytes);
    if (c.final_states) layout.PlaceOutput(&q, "final_states", state_bytes);
    placed = q.output_shared_memory_size();
    v1::ForwardResponse r;
    st = stub->Forward(&ctx, q, &r);
    if (!st.ok()) return absl::StrCat(c.DebugString(), ": ", st.error_message());
    fetched = layout.FetchOutputs(&r);
    errors = CheckForward(c, in, r);
  } else if (c.op == Op::kBackward) {
    v1::BackwardRequest q = MakeBackward(c, in);
    layout.PlaceInputs(&q);
    layout.PlaceOutput(&q, "dx", x_bytes);
    layout.PlaceOutput(&q, "dweight", c.dim * c.width * gs);
    if (c.bias) layout.PlaceOutput(&q, "dbias", c.dim * gs);
    if (c.dinitial_states) layout.PlaceOutput(&q, "dinitial_states", state_bytes);
    placed = q.output_shared_memory_size();
    v1::BackwardResponse r;
    st = stub->Backward(&ctx, q, &r);
    if (!st.ok()) return absl::StrCat(c.DebugString(), ": ", st.error_message());
    fetched = layout.FetchOutputs(&r);
    errors = CheckBackward(c, in, r);
  } else {
    v1::UpdateRequest q = MakeUpdate(c, in);
    layout.PlaceInputs(&q);
    layout.PlaceOutput(&q, "y", x_bytes);
    layout.PlaceOutput(&q, "conv_state", Elems({c.batch, c.dim, c.state_len}) * xs);
    placed = q.output_shared_memory_size();
    v1::UpdateResponse r;
    st = stub->Update(&ctx, q, &r);
    if (!st.ok()) return absl::StrCat(c.DebugString(), ": ", st.error_message());
    fetched = layout.FetchOutputs(&r);
    errors = CheckUpdate(c, in, r);
  }
  if (fetched != placed) {
    absl::StrAppend(&errors, placed, " outputs placed in the region, ", fetched,
                    " came back there; ");
  }
  return errors.empty() ? "" : absl::StrCat(c.DebugString(), ": ", errors);
}

TEST_F(DeviceRegionE2E, RandomRequestsOfEveryOpMatchTheCpu) {
  CONV1D_TEST_SEED_SCOPE(seed, 2026);
  Rng rng(seed);
  for (Op op : {Op::kForward, Op::kBackward, Op::kUpdate}) {
    for (int i = 0; i < 12; ++i) {
      Case c = RandomCase(op, &rng);
      EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), c, &rng), "");
    }
  }
}

TEST_F(DeviceRegionE2E, LargeForwardAndUpdateInPlace) {
  CONV1D_TEST_SEED_SCOPE(seed, 7);
  Rng rng(seed);
  Case fwd;
  fwd.x_dtype = fwd.w_dtype = DType::kBF16;
  fwd.batch = 4;
  fwd.dim = 512;
  fwd.seqlen = 4096;  // 16 MiB of bf16 x, the same of y
  fwd.bias = true;
  fwd.act = Activation::kSiLU;
  fwd.initial_states = fwd.final_states = true;
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), fwd, &rng), "");
  Case step;
  step.op = Op::kUpdate;
  step.batch = 64;
  step.dim = 1024;
  step.seqlen = 1;
  step.state_len = 3;
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), step, &rng), "");
}

TEST_F(DeviceRegionE2E, StatusAndMetadataListTheRegion) {
  grpc::ClientContext ctx;
  inference::CudaSharedMemoryStatusRequest q;
  inference::CudaSharedMemoryStatusResponse r;
  ASSERT_TRUE(oip_->CudaSharedMemoryStatus(&ctx, q, &r).ok());
  ASSERT_EQ(r.regions().count("dev"), 1u);
  EXPECT_EQ(r.regions().at("dev").byte_size(), static_cast<uint64_t>(kRegionBytes));
  EXPECT_EQ(r.regions().at("dev").device_id(), 0u);
  grpc::ClientContext sys_ctx;
  inference::SystemSharedMemoryStatusResponse sys;
  ASSERT_TRUE(oip_->SystemSharedMemoryStatus(&sys_ctx, {}, &sys).ok());
  EXPECT_EQ(sys.regions().count("dev"), 0u);
  grpc::ClientContext meta_ctx;
  inference::ServerMetadataResponse meta;
  ASSERT_TRUE(oip_->ServerMetadata(&meta_ctx, {}, &meta).ok());
  EXPECT_THAT(meta.extensions(), ::testing::Contains("cuda_shared_memory"));
}

TEST_F(DeviceRegionE2E, ErrorsNameTheRegionAndNothingBreaks) {
  CONV1D_TEST_SEED_SCOPE(seed, 11);
  Rng rng(seed);
  Case c;
  c.dim = 16;
  c.seqlen = 64;
  const Inputs in = MakeInputs(c, &rng);
  v1::ForwardRequest q = MakeForward(c, in);
  RegionLayout layout(region_.get(), "dev");
  layout.PlaceInputs(&q);
  {
    // Past the region's end.
    v1::ForwardRequest bad = q;
    bad.mutable_x()->mutable_shared_memory()->set_offset(kRegionBytes - 100);
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    const grpc::Status st = stub_->Forward(&ctx, bad, &r);
    EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("region \"dev\""));
  }
  {
    v1::ForwardRequest bad = q;
    bad.mutable_x()->mutable_shared_memory()->set_region("nope");
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    const grpc::Status st = stub_->Forward(&ctx, bad, &r);
    EXPECT_EQ(st.error_code(), grpc::NOT_FOUND) << st.error_message();
  }
  auto cuda_register = [&](const std::string& name, const std::string& handle, int64_t device,
                           uint64_t bytes) {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_raw_handle(handle);
    req.set_device_id(device);
    req.set_byte_size(bytes);
    inference::CudaSharedMemoryRegisterResponse resp;
    return oip_->CudaSharedMemoryRegister(&ctx, req, &resp);
  };
  grpc::Status st = cuda_register("junk", std::string(region_->raw_handle().size(), 'x'), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("region \"junk\": cannot open the IPC handle"));
  st = cuda_register("big", region_->raw_handle(), 0, kRegionBytes * 4);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("more than the"));
  st = cuda_register("far", region_->raw_handle(), 9, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("device_id 9"));
  st = cuda_register("short", "abc", 0, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  st = cuda_register("dev", region_->raw_handle(), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::ALREADY_EXISTS) << st.error_message();

  // A second registration of the same memory under another name, used and
  // released: the server is still healthy and the first still serves.
  ASSERT_TRUE(cuda_register("again", region_->raw_handle(), 0, 1 << 20).ok());
  v1::ForwardRequest again = q;
  again.mutable_x()->mutable_shared_memory()->set_region("again");
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    st = stub_->Forward(&ctx, again, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  grpc::ClientContext un_ctx;
  inference::CudaSharedMemoryUnregisterRequest un;
  un.set_name("again");
  inference::CudaSharedMemoryUnregisterResponse un_resp;
  ASSERT_TRUE(oip_->CudaSharedMemoryUnregister(&un_ctx, un, &un_resp).ok());
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    st = stub_->Forward(&ctx, again, &r);
    EXPECT_EQ(st.error_code(), grpc::NOT_FOUND) << st.error_message();
  }
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), c, &rng), "");
}

// The inference protocol's ModelInfer with Triton's region parameters.
TEST_F(DeviceRegionE2E, InferenceProtocolReadsAndWritesTheRegion) {
  CONV1D_TEST_SEED_SCOPE(seed, 5);
  Rng rng(seed);
  Case c;
  c.batch = 2;
  c.dim = 64;
  c.seqlen = 300;
  c.bias = true;
  const Inputs in = MakeInputs(c, &rng);
  RegionLayout layout(region_.get(), "dev");
  inference::ModelInferRequest q;
  q.set_model_name("conv1d_forward");
  auto add_input = [&](const std::string& name, const v1::Tensor& t) {
    auto* input = q.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    for (int64_t s : t.shape()) input->add_shape(s);
    const int64_t at = layout.Reserve(static_cast<int64_t>(t.data().size()));
    ASSERT_TRUE(region_->Write(at, t.data().data(), t.data().size()).ok());
    auto& p = *input->mutable_parameters();
    p["shared_memory_region"].set_string_param("dev");
    p["shared_memory_offset"].set_int64_param(at);
    p["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(t.data().size()));
  };
  add_input("x", in.x);
  add_input("weight", in.weight);
  add_input("bias", in.bias);
  const int64_t y_bytes = c.batch * c.dim * c.seqlen * 4;
  const int64_t y_at = layout.Reserve(y_bytes);
  auto* out = q.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("dev");
  (*out->mutable_parameters())["shared_memory_offset"].set_int64_param(y_at);
  (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(y_bytes);
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  const grpc::Status st = oip_->ModelInfer(&ctx, q, &r);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(r.raw_output_contents_size() == 0 ||
                r.raw_output_contents(0).empty(), true);
  v1::ForwardResponse as_v1;
  v1::Tensor* y = as_v1.mutable_y();
  y->set_dtype(v1::FP32);
  for (int64_t s : {c.batch, c.dim, c.seqlen}) y->add_shape(s);
  std::string bytes(static_cast<size_t>(y_bytes), '\0');
  ASSERT_TRUE(region_->Read(y_at, bytes.data(), y_bytes).ok());
  y->set_data(bytes);
  EXPECT_EQ(CheckForward(c, in, as_v1), "");
}

// large-fwd (B=4, D=2048, L=2048 bf16: 32 MiB in, 32 MiB out) at 8 clients
// for two seconds each, with the tensors in gRPC messages and in a device
// region: prints requests per second (RecordProperty too). The first answer
// of each is checked against the CPU reference.
TEST_F(DeviceRegionE2E, LargeForwardThroughputByMemory) {
  constexpr int kClients = 8;
  CONV1D_TEST_SEED_SCOPE(seed, 29);
  Rng rng(seed);
  Case c;
  c.x_dtype = c.w_dtype = DType::kBF16;
  c.batch = 4;
  c.dim = 2048;
  c.seqlen = 2048;
  c.bias = true;
  c.act = Activation::kSiLU;
  const Inputs in = MakeInputs(c, &rng);
  const v1::ForwardRequest plain = MakeForward(c, in);
  const int64_t x_bytes = static_cast<int64_t>(in.x.data().size());
  absl::StatusOr<std::unique_ptr<DeviceRegion>> big =
      DeviceRegion::Create({.device = 0, .byte_size = (kClients + 2) * x_bytes});
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE((*big)->Register(*channel_, "bench").ok());
  RegionLayout layout(big->get(), "bench");
  v1::ForwardRequest shared = plain;
  layout.PlaceInputs(&shared);  // one x and weights for every client
  std::vector<v1::ForwardRequest> per_client(kClients, shared);
  for (v1::ForwardRequest& q : per_client) layout.PlaceOutput(&q, "y", x_bytes);

  auto run = [&](const char* label, std::function<v1::ForwardRequest(int)> request_of) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    const absl::Time end = absl::Now() + absl::Seconds(2);
    std::vector<std::thread> clients;
    for (int t = 0; t < kClients; ++t) {
      clients.emplace_back([&, t] {
        auto stub = v1::Conv1d::NewStub(MakeChannel(
            absl::StrCat("127.0.0.1:", server_->Port()), /*fresh=*/true));
        const v1::ForwardRequest q = request_of(t);
        while (absl::Now() < end && !failed) {
          grpc::ClientContext ctx;
          v1::ForwardResponse r;
          if (!stub->Forward(&ctx, q, &r).ok()) failed = true;
          ++done;
        }
      });
    }
    for (std::thread& t : clients) t.join();
    EXPECT_FALSE(failed) << label;
    const double rps = static_cast<double>(done) / 2.0;
    std::printf("large-fwd c=%d %s: %.1f req/s\n", kClients, label, rps);
    RecordProperty(absl::StrCat("rps_", label), absl::StrCat(rps));
    return rps;
  };
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    ASSERT_TRUE(stub_->Forward(&ctx, plain, &r).ok());
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    ASSERT_TRUE(stub_->Forward(&ctx, per_client[0], &r).ok());
    EXPECT_EQ(layout.FetchOutputs(&r), 1);
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  const double grpc_rps = run("grpc", [&](int) { return plain; });
  const double device_rps = run("device", [&](int t) { return per_client[t]; });
  std::printf("large-fwd c=%d device/grpc: %.1fx\n", kClients, device_rps / grpc_rps);
  EXPECT_TRUE((*big)->Unregister().ok());
}

// A POSIX shared-memory object of `bytes` bytes, mapped here, unlinked at
// the end.
class ShmObject {
 public:
  explicit ShmObject(int64_t bytes)
      : key_(absl::StrCat("/conv1d_gpu_e2e_", getpid())), bytes_(bytes) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
    base_ = static_cast<char*>(mmap(nullptr, static_cast<size_t>(bytes),
                                    PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
  }
  ~ShmObject() {
    munmap(base_, static_cast<size_t>(bytes_));
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() { return base_; }

 private:
  std::string key_;
  int64_t bytes_;
  int fd_ = -1;
  char* base_ = nullptr;
};

// System regions on the GPU backend: page-locked at registration (no
// warning that one stays pageable), tensors of every size class (copy
// kernel, in place, DMA) right.
TEST_F(DeviceRegionE2E, PinnedSystemRegionsMatchTheCpu) {
  constexpr int64_t kSystemBytes = int64_t{16} << 20;
  ShmObject obj(kSystemBytes);
  {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name("sys");
    req.set_key(obj.key());
    req.set_byte_size(static_cast<uint64_t>(kSystemBytes));
    inference::SystemSharedMemoryRegisterResponse resp;
    const grpc::Status st = oip_->SystemSharedMemoryRegister(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  CONV1D_TEST_SEED_SCOPE(seed, 3);
  Rng rng(seed);
  for (int64_t seqlen : {int64_t{16}, int64_t{1000}, int64_t{20000}}) {
    for (Op op : {Op::kForward, Op::kBackward}) {
      Case c = RandomCase(op, &rng);
      c.batch = 2;
      c.dim = 32;
      c.seqlen = seqlen;
      const Inputs in = MakeInputs(c, &rng);
      // Inputs into the object, outputs back in the response.
      int64_t next = 0;
      auto place = [&](v1::Tensor* t) {
        if (t->data().empty()) return;
        std::memcpy(obj.data() + next, t->data().data(), t->data().size());
        t->mutable_shared_memory()->set_region("sys");
        t->mutable_shared_memory()->set_offset(next);
        next += (static_cast<int64_t>(t->data().size()) + 255) / 256 * 256;
        t->clear_data();
      };
      grpc::ClientContext ctx;
      std::string errors;
      grpc::Status st;
      if (op == Op::kForward) {
        v1::ForwardRequest q = MakeForward(c, in);
        place(q.mutable_x());
        if (q.has_initial_states()) place(q.mutable_initial_states());
        v1::ForwardResponse r;
        st = stub_->Forward(&ctx, q, &r);
        if (st.ok()) errors = CheckForward(c, in, r);
      } else {
        v1::BackwardRequest q = MakeBackward(c, in);
        place(q.mutable_x());
        place(q.mutable_dout());
        v1::BackwardResponse r;
        st = stub_->Backward(&ctx, q, &r);
        if (st.ok()) errors = CheckBackward(c, in, r);
      }
      ASSERT_TRUE(st.ok()) << c.DebugString() << ": " << st.error_message();
      EXPECT_EQ(errors, "") << c.DebugString();
    }
  }
  grpc::ClientContext ctx;
  inference::SystemSharedMemoryUnregisterRequest un;
  un.set_name("sys");
  inference::SystemSharedMemoryUnregisterResponse un_resp;
  ASSERT_TRUE(oip_->SystemSharedMemoryUnregister(&ctx, un, &un_resp).ok());
  EXPECT_THAT(server_->Log(), ::testing::Not(HasSubstr("stays pageable")));
}

}  // namespace
}  // namespace conv1d::e2e
