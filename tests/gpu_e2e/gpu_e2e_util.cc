#include "tests/gpu_e2e/gpu_e2e_util.h"

#include "kernels/gpu_compat.h"

namespace conv1d::e2e {
namespace {

using google::protobuf::FieldDescriptor;

int64_t WireDTypeSize(v1::DType d) { return d == v1::FP32 ? 4 : 2; }

bool IsTensor(const FieldDescriptor* f) {
  return f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() &&
         f->message_type() == v1::Tensor::descriptor();
}

}  // namespace

using google::protobuf::Message;

int64_t TensorBytes(const v1::Tensor& t) {
  int64_t n = WireDTypeSize(t.dtype());
  for (int64_t s : t.shape()) n *= s;
  return n;
}

int64_t Elems(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t RegionLayout::Reserve(int64_t bytes) {
  const int64_t at = next_;
  next_ += (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  EXPECT_LE(next_, region_->byte_size());
  return at;
}

// Every Tensor of `m` (and of its InlineWeights) with bytes goes into the
// region: its data is cleared and shared_memory names the place.
void RegionLayout::PlaceInputs(Message* m) {
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
void RegionLayout::PlaceOutput(Message* request, const std::string& field, int64_t bytes) {
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
int RegionLayout::FetchOutputs(Message* response) {
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

ServerProcess* GpuServerTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* GpuServerTest::channel_ = nullptr;

void GpuServerTest::SetUpTestSuite() {
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
void GpuServerTest::TearDownTestSuite() {
  delete channel_;
  channel_ = nullptr;
  delete server_;
  server_ = nullptr;
}

void GpuServerTest::SetUp() {
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

}  // namespace conv1d::e2e
