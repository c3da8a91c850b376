// The gpu backend against the CPU implementation: fused ragged batches of
// every op, registered (device-cached) and inline weights, requests split
// across rounds, concurrent lanes, and no allocation after warm-up.
// Label gpu: skips itself when no device is visible.
#include "server/backends/gpu/gpu_backend.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kernels/conv1d_params.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "server/core/observer.h"
#include "server/core/segment_check.h"
#include "server/core/state_slots.h"
#include "tests/common/test_seed.h"

namespace conv1d {
namespace {

struct Case {
  Op op;
  DType x;
  DType w;
  Layout layout;
  int width;
};

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuBackend::VisibleDeviceCount() == 0) GTEST_SKIP() << "no GPU device";
  }
};

BatchKey KeyOf(const Case& c, int64_t dim) {
  BatchKey k;
  k.op = c.op;
  k.x_dtype = c.x;
  k.weight_dtype = c.w;
  k.grad_weight_dtype = c.w;
  k.dim = dim;
  k.width = c.width;
  k.activation = Activation::kSiLU;
  k.layout = c.layout;
  k.has_bias = true;
  k.has_initial_states = c.op != Op::kUpdate;
  k.return_final_states = c.op == Op::kForward;
  k.has_dfinal_states = c.op == Op::kBackward;
  k.return_dinitial_states = c.op == Op::kBackward;
  return k;
}

std::vector<uint8_t> Random(DType t, int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n * DTypeSize(t));
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(v.data(), t, i, dist(rng));
  return v;
}

// An update's state holds W + 1 steps unless state_len says otherwise.
std::unique_ptr<ConvBuffers> MakeRequest(const BatchKey& key, int64_t b, int64_t l,
                                         std::mt19937_64& rng, int64_t state_len = -1) {
  auto r = std::make_unique<ConvBuffers>();
  r->key = key;
  r->batch = b;
  r->seqlen = l;
  const int64_t d = key.dim, k = key.width - 1;
  r->x = Random(key.x_dtype, b * d * l, rng);
  r->weight = Random(key.weight_dtype, d * key.width, rng);
  r->bias = Random(key.weight_dtype, d, rng);
  if (key.op == Op::kBackward) r->dout = Random(key.x_dtype, b * d * l, rng);
  if (key.has_initial_states) r->initial_states = Random(key.x_dtype, b * d * k, rng);
  if (key.has_dfinal_states) r->dfinal_states = Random(key.x_dtype, b * d * k, rng);
  if (key.op == Op::kUpdate) {
    r->state_len = state_len >= 0 ? state_len : k + 2;
    r->conv_state = Random(key.x_dtype, b * d * r->state_len, rng);
  }
  r->AllocateOutputs();
  return r;
}

double Tolerance(DType t) { return t == DType::kF32 ? 1e-5 : t == DType::kF16 ? 2e-3 : 1.5e-2; }

// ||got - want|| / ||want|| over one output, NaN counts as failure.
void ExpectClose(const char* what, DType t, const std::vector<uint8_t>& got,
                 const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t n = static_cast<int64_t>(want.size()) / DTypeSize(t);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = LoadAsFloat(got.data(), t, i), b = LoadAsFloat(want.data(), t, i);
    ASSERT_FALSE(std::isnan(a)) << what << " element " << i << " not written";
    num += (a - b) * (a - b);
    den += b * b;
  }
  EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), Tolerance(t)) << what;
}

// Runs `reqs` as one batch on `lane` and checks every output against the CPU.
void RunAndCheck(GpuBackend& gpu, int lane, const BatchKey& key,
                 std::vector<std::unique_ptr<ConvBuffers>>& reqs) {
  std::vector<ConvBuffers> want;
  for (auto& r : reqs) {
    want.push_back(*r);
    ASSERT_TRUE(RunCpuConv(&want.back(), nullptr).ok());
    for (auto* out : {&r->y, &r->final_states, &r->dx, &r->dweight, &r->dbias,
                      &r->dinitial_states, &r->conv_state_out}) {
      std::fill(out->begin(), out->end(), 0xff);  // NaN in every dtype
    }
  }
  std::vector<ConvSegment> segs;
  for (auto& r : reqs) segs.push_back(r->Segment());
  std::vector<ConvSegment*> ptrs;
  for (auto& s : segs) ptrs.push_back(&s);
  BatchStats stats;
  const absl::Status st = gpu.RunBatch(lane, key, absl::MakeSpan(ptrs), &stats);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GE(stats.launches, 1);
  const DType gw = key.grad_weight_dtype;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ExpectClose("y", key.x_dtype, reqs[i]->y, want[i].y);
    ExpectClose("final_states", key.x_dtype, reqs[i]->final_states, want[i].final_states);
    ExpectClose("dx", key.x_dtype, reqs[i]->dx, want[i].dx);
    ExpectClose("dweight", gw, reqs[i]->dweight, want[i].dweight);
    ExpectClose("dbias", gw, reqs[i]->dbias, want[i].dbias);
    ExpectClose("dinitial_states", key.x_dtype, reqs[i]->dinitial_states,
                want[i].dinitial_states);
    ExpectClose("conv_state_out", key.x_dtype, reqs[i]->conv_state_out,
                want[i].conv_state_out);
  }
}

TEST_F(GpuBackendTest, FusedRaggedBatchesMatchCpuForEveryOp) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 2;
  opt.lane_buffer_bytes = 64 << 20;
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CONV1D_TEST_SEED_SCOPE(test_seed, 7);
  std::mt19937_64 rng(test_seed);
  const Case cases[] = {
      {Op::kForward, DType::kF32, DType::kF32, Layout::kChannelFirst, 4},
      {Op::kForward, DType::kBF16, DType::kBF16, Layout::kChannelLast, 3},
      {Op::kForward, DType::kF16, DType::kF32, Layout::kChannelFirst, 7},
      {Op::kForward, DType::kF16, DType::kBF16, Layout::kChannelLast, 4},
      {Op::kBackward, DType::kBF16, DType::kF16, Layout::kChannelFirst, 3},
      {Op::kBackward, DType::kF32, DType::kF32, Layout::kChannelFirst, 4},
      {Op::kBackward, DType::kBF16, DType::kF32, Layout::kChannelLast, 2},
      {Op::kUpdate, DType::kF32, DType::kF32, Layout::kChannelFirst, 4},
      {Op::kUpdate, DType::kBF16, DType::kBF16, Layout::kChannelLast, 4},
  };
  for (const Case& c : cases) {
    const BatchKey key = KeyOf(c, 96);
    SCOPED_TRACE(key.DebugString());
    std::vector<std::unique_ptr<ConvBuffers>> reqs;
    std::uniform_int_distribution<int64_t> len(1, 300), bat(1, 3);
    for (int i = 0; i < 17; ++i) {
      reqs.push_back(MakeRequest(key, bat(rng), c.op == Op::kUpdate ? 1 + i % 3 : len(rng), rng));
    }
    RunAndCheck(**gpu, 0, key, reqs);
  }
}

TEST_F(GpuBackendTest, RequestsLargerThanALaneAreSplitAlongBatch) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 1;
  opt.lane_buffer_bytes = 2 << 20;  // forces many rounds
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CONV1D_TEST_SEED_SCOPE(test_seed, 11);
  std::mt19937_64 rng(test_seed);
  for (Op op : {Op::kForward, Op::kBackward}) {
    const BatchKey key = KeyOf({op, DType::kF32, DType::kF32, Layout::kChannelFirst, 4}, 256);
    std::vector<std::unique_ptr<ConvBuffers>> reqs;
    // ~5.6 MiB of x alone; one backward row (x, dout, dx) is ~1.8 MiB.
    reqs.push_back(MakeRequest(key, 9, 600, rng));
    reqs.push_back(MakeRequest(key, 2, 33, rng));
    RunAndCheck(**gpu, 0, key, reqs);
  }
  const BatchKey key = KeyOf({Op::kForward, DType::kF32, DType::kF32, Layout::kChannelFirst, 4}, 256);
  ConvBuffers huge;
  huge.key = key;
  huge.batch = 1;
  huge.seqlen = 1 << 20;
  const ConvSegment seg = huge.Segment();
  const absl::Status st = CheckBackendLimits((*gpu)->limits(), key, seg);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("lane_buffer_bytes"), absl::string_view::npos) << st;
}

// Requests whose tensors live in the backend's host buffers: large ones move
// by their own DMA, small ones by the gather/scatter copy kernels or packed
// through staging, in the same fused batch; every output must still equal
// the CPU's, nothing is allocated, and with gathering on no request tensor
// passes through staging.
// Parameters: gather_small_host_tensors, whether every round's copies go
// through the device's shared copy streams (else the lane's own stream),
// whether a round's DMAs are queued in one batch call, and
// in_place_host_tensors (the forward kernel then uses the short requests'
// host-pool tensors where they are, and the update kernel the one-token
// request's with a state of W-1).
class GpuBackendHostPoolTest
    : public GpuBackendTest,
      public ::testing::WithParamInterface<std::tuple<bool, bool, bool, bool>> {};

TEST_P(GpuBackendHostPoolTest, HostPoolTensorsMoveByDmaOrCopyKernelAndMatchCpu) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 1;
  opt.lane_buffer_bytes = 16 << 20;
  opt.host_pool_bytes = 64 << 20;
  opt.direct_copy_bytes = 64 << 10;
  const bool gather = std::get<0>(GetParam());
  opt.gather_small_host_tensors = gather;
  opt.shared_copy_streams = std::get<1>(GetParam());
  opt.batch_copies = std::get<2>(GetParam());
  const bool in_place = std::get<3>(GetParam());
  opt.in_place_host_tensors = in_place;
  opt.shared_copy_min_bytes = 0;
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CONV1D_TEST_SEED_SCOPE(test_seed, 5);
  std::mt19937_64 rng(test_seed);
  for (const Case& c : {Case{Op::kForward, DType::kF32, DType::kF32, Layout::kChannelFirst, 4},
                        Case{Op::kBackward, DType::kBF16, DType::kBF16, Layout::kChannelLast, 3},
                        Case{Op::kUpdate, DType::kF16, DType::kF32, Layout::kChannelFirst, 4}}) {
    const BatchKey key = KeyOf(c, 128);
    SCOPED_TRACE(key.DebugString());
    std::vector<std::unique_ptr<ConvBuffers>> reqs;
    for (int64_t l : {700, 3, 1100, 64}) reqs.push_back(MakeRequest(key, 2, l, rng));
    reqs.push_back(MakeRequest(key, 2, 1, rng, key.width - 1));  // a decode step
    std::vector<ConvBuffers> want;
    std::vector<ConvSegment> segs;
    std::vector<std::shared_ptr<void>> keep;
    // Moves a view into the backend's host buffers, saying so in its
    // placement; outputs are poisoned.
    auto in_pool = [&](auto* v, const void* src) {
      HostBuffer buffer = (*gpu)->host_buffers()->Allocate(v->bytes);
      keep.push_back(buffer.data);
      if (src != nullptr) std::memcpy(keep.back().get(), src, v->bytes);
      else std::memset(keep.back().get(), 0xff, v->bytes);
      v->data = keep.back().get();
      v->where.kind = buffer.kind;
    };
    for (auto& r : reqs) {
      want.push_back(*r);
      ASSERT_TRUE(RunCpuConv(&want.back(), nullptr).ok());
      ConvSegment s = r->Segment();
      for (TensorView* v : {&s.x, &s.dout, &s.initial_states, &s.dfinal_states, &s.conv_state}) {
        if (v->present()) in_pool(v, v->data);
      }
      for (OutputView* v : {&s.y, &s.final_states, &s.dx, &s.dinitial_states,
                            &s.conv_state_out}) {
        if (v->present()) in_pool(v, nullptr);
      }
      std::fill(r->dweight.begin(), r->dweight.end(), 0xff);
      std::fill(r->dbias.begin(), r->dbias.end(), 0xff);
      segs.push_back(s);
    }
    std::vector<ConvSegment*> ptrs;
    for (auto& s : segs) ptrs.push_back(&s);
    const int64_t allocations = gpu::AllocationCount();
    BatchStats stats;
    const absl::Status st = (*gpu)->RunBatch(0, key, absl::MakeSpan(ptrs), &stats);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(gpu::AllocationCount(), allocations);
    // Only the (heap) weights may pass through staging when gathering.
    int64_t weight_bytes = 0;
    for (const ConvSegment& s : segs) weight_bytes += s.weight.bytes + s.bias.bytes;
    if (gather) {
      EXPECT_LE(stats.staged_bytes, weight_bytes);
    } else {
      EXPECT_GT(stats.staged_bytes, weight_bytes);
    }
    // The forward's short requests (L = 3 and 1: scalar rows; 64: 16
    // vectors of fp32) and the update's decode step are used in place
    // exactly when asked for: every activation and state tensor of them
    // smaller than direct_copy_bytes (L = 64's x and y are not, and move by
    // DMA); the backward never is.
    int64_t want_in_place = 0;
    if (gather && in_place && key.op != Op::kBackward) {
      auto small = [&](int64_t b) { return b < opt.direct_copy_bytes ? b : 0; };
      for (const ConvSegment& s : segs) {
        if (key.op == Op::kForward ? s.seqlen > 128
                                   : s.seqlen != 1 || s.state_len != key.width - 1) {
          continue;
        }
        want_in_place += small(s.x.bytes) + small(s.initial_states.bytes) +
                         small(s.conv_state.bytes) + small(s.y.bytes) +
                         small(s.final_states.bytes) + small(s.conv_state_out.bytes);
      }
      EXPECT_GT(want_in_place, 0);
    }
    EXPECT_EQ(stats.in_place_bytes, want_in_place);
    auto bytes_of = [](const OutputView& v) {
      const auto* p = static_cast<const uint8_t*>(v.data);
      return v.present() ? std::vector<uint8_t>(p, p + v.bytes) : std::vector<uint8_t>();
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      ExpectClose("y", key.x_dtype, bytes_of(segs[i].y), want[i].y);
      ExpectClose("final_states", key.x_dtype, bytes_of(segs[i].final_states),
                  want[i].final_states);
      ExpectClose("dx", key.x_dtype, bytes_of(segs[i].dx), want[i].dx);
      ExpectClose("dinitial_states", key.x_dtype, bytes_of(segs[i].dinitial_states),
                  want[i].dinitial_states);
      ExpectClose("conv_state_out", key.x_dtype, bytes_of(segs[i].conv_state_out),
                  want[i].conv_state_out);
      ExpectClose("dweight", key.grad_weight_dtype, reqs[i]->dweight, want[i].dweight);
      ExpectClose("dbias", key.grad_weight_dtype, reqs[i]->dbias, want[i].dbias);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GatheredOrStaged, GpuBackendHostPoolTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()));

// When the host pool has no room, host_buffers() still answers (from
// ordinary memory) and the observer hears the miss; the pool's bytes in use
// follow every allocation and release.
TEST_F(GpuBackendTest, FullHostPoolFallsBackToHeapAndReportsTheMiss) {
  class PoolObserver final : public Observer {
   public:
    void OnPoolBytes(const char* pool, int, int64_t bytes) override {
      absl::MutexLock lock(&mu_);
      if (std::string(pool) == "host_in_use") host_in_use_ = bytes;
    }
    void OnHostPoolMiss(int64_t bytes) override {
      absl::MutexLock lock(&mu_);
      missed_.push_back(bytes);
    }
    int64_t host_in_use() const {
      absl::MutexLock lock(&mu_);
      return host_in_use_;
    }
    std::vector<int64_t> missed() const {
      absl::MutexLock lock(&mu_);
      return missed_;
    }

   private:
    mutable absl::Mutex mu_;
    int64_t host_in_use_ = -1;
    std::vector<int64_t> missed_;
  } observer;
  GpuBackendOptions opt;
  opt.lanes_per_device = 1;
  opt.lane_buffer_bytes = 4 << 20;
  opt.host_pool_bytes = 1 << 20;
  opt.observer = &observer;
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::shared_ptr<HostBufferProvider> buffers = (*gpu)->host_buffers();
  ASSERT_NE(buffers, nullptr);
  EXPECT_TRUE(buffers->page_locked());
  HostBuffer pa = buffers->Allocate(300 << 10);  // 512 KiB class
  HostBuffer pb = buffers->Allocate(512 << 10);
  EXPECT_EQ(pa.kind, MemoryKind::kHostPinned);
  std::shared_ptr<void> a = pa.data, b = pb.data;
  pa = HostBuffer();
  pb = HostBuffer();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(observer.host_in_use(), 1 << 20);
  EXPECT_TRUE(observer.missed().empty());
  HostBuffer pc = buffers->Allocate(100 << 10);
  EXPECT_EQ(pc.kind, MemoryKind::kHostHeap);
  std::shared_ptr<void> c = pc.data;
  pc = HostBuffer();
  ASSERT_NE(c, nullptr);
  std::memset(c.get(), 0x5a, 100 << 10);  // ordinary, writable memory
  EXPECT_EQ(observer.missed(), std::vector<int64_t>{100 << 10});
  EXPECT_EQ(observer.host_in_use(), 1 << 20);
  a.reset();
  EXPECT_EQ(observer.host_in_use(), 512 << 10);
  c.reset();
  b.reset();
  EXPECT_EQ(observer.host_in_use(), 0);
}

// Decode rounds: registered weights (on the device after the first batch)
// and host-pool tensors the kernel uses in place (forward rows of 1..3
// steps with states; one-token updates with a state of W-1), so once the
// weights are uploaded a batch copies in only its segment table and copies
// nothing out. Every output matches the CPU's, in fp32 and bf16, W = 2..4.
TEST_F(GpuBackendTest, DecodeRoundsCopyOnlyTheirTableAndMatchCpu) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 1;
  opt.lane_buffer_bytes = 16 << 20;
  opt.host_pool_bytes = 64 << 20;
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CONV1D_TEST_SEED_SCOPE(test_seed, 17);
  std::mt19937_64 rng(test_seed);
  int64_t cache_id = 500;
  for (Op op : {Op::kForward, Op::kUpdate}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (int width : {2, 3, 4}) {
        const BatchKey key = KeyOf({op, t, t, Layout::kChannelFirst, width}, 96);
        SCOPED_TRACE(key.DebugString());
        auto weights = std::make_shared<std::vector<uint8_t>>(Random(t, 96 * (width + 1), rng));
        const int64_t wbytes = 96 * width * DTypeSize(t);
        cache_id += 2;
        for (int pass = 0; pass < 2; ++pass) {  // the first uploads the weights
          std::vector<std::unique_ptr<ConvBuffers>> reqs;
          std::vector<ConvBuffers> want;
          std::vector<ConvSegment> segs;
          std::vector<std::shared_ptr<void>> keep;
          auto in_pool = [&](auto* v, const void* src) {
            HostBuffer buffer = (*gpu)->host_buffers()->Allocate(v->bytes);
            keep.push_back(buffer.data);
            if (src != nullptr) std::memcpy(keep.back().get(), src, v->bytes);
            else std::memset(keep.back().get(), 0xff, v->bytes);  // poisoned output
            v->data = keep.back().get();
            v->where.kind = buffer.kind;
          };
          for (int i = 0; i < 6; ++i) {
            const int64_t l = op == Op::kUpdate ? 1 : 1 + i % 3;
            reqs.push_back(MakeRequest(key, 1 + i % 2, l, rng, width - 1));
            ConvBuffers& r = *reqs.back();
            std::copy(weights->begin(), weights->begin() + wbytes, r.weight.begin());
            std::copy(weights->begin() + wbytes, weights->end(), r.bias.begin());
            want.push_back(r);
            ASSERT_TRUE(RunCpuConv(&want.back(), nullptr).ok());
            ConvSegment sg = r.Segment();
            for (TensorView* v : {&sg.x, &sg.initial_states, &sg.conv_state}) {
              if (v->present()) in_pool(v, v->data);
            }
            for (OutputView* v : {&sg.y, &sg.final_states, &sg.conv_state_out}) {
              if (v->present()) in_pool(v, nullptr);
            }
            sg.weight.data = weights->data();
            sg.weight.owner = weights;
            sg.weight.cache_id = cache_id;
            sg.bias.data = weights->data() + wbytes;
            sg.bias.owner = weights;
            sg.bias.cache_id = cache_id + 1;
            segs.push_back(sg);
          }
          std::vector<ConvSegment*> ptrs;
          for (auto& sg : segs) ptrs.push_back(&sg);
          BatchStats stats;
          const absl::Status st = (*gpu)->RunBatch(0, key, absl::MakeSpan(ptrs), &stats);
          ASSERT_TRUE(st.ok()) << st;
          if (pass == 1) {
            EXPECT_EQ(stats.launches, 1);
            EXPECT_EQ(stats.d2h_bytes, 0);
            EXPECT_EQ(stats.staged_bytes, 0);
            const int64_t table = segs.size() * sizeof(kernels::Conv1dSegment);
            EXPECT_GE(stats.h2d_bytes, table);
            EXPECT_LT(stats.h2d_bytes, table + gpu::kSlotAlignBytes);
            EXPECT_EQ(stats.in_place_bytes, [&] {
              int64_t b = 0;
              for (const ConvSegment& sg : segs) {
                b += sg.x.bytes + sg.initial_states.bytes + sg.conv_state.bytes + sg.y.bytes +
                     sg.final_states.bytes + sg.conv_state_out.bytes;
              }
              return b;
            }());
          }
          auto bytes_of = [](const OutputView& v) {
            const auto* b = static_cast<const uint8_t*>(v.data);
            return v.present() ? std::vector<uint8_t>(b, b + v.bytes) : std::vector<uint8_t>();
          };
          for (size_t i = 0; i < segs.size(); ++i) {
            ExpectClose("y", t, bytes_of(segs[i].y), want[i].y);
            ExpectClose("final_states", t, bytes_of(segs[i].final_states), want[i].final_states);
            ExpectClose("conv_state_out", t, bytes_of(segs[i].conv_state_out),
                        want[i].conv_state_out);
          }
        }
      }
    }
  }
}

TEST_F(GpuBackendTest, RegisteredWeightsAreCachedOnDeviceAndNothingIsAllocatedAfterWarmUp) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 4;
  opt.lane_buffer_bytes = 32 << 20;
  auto created = GpuBackend::Create(opt);
  ASSERT_TRUE(created.ok()) << created.status();
  GpuBackend& gpu = **created;
  CONV1D_TEST_SEED_SCOPE(test_seed, 3);
  std::mt19937_64 rng(test_seed);
  const BatchKey key = KeyOf({Op::kForward, DType::kF32, DType::kF32, Layout::kChannelFirst, 4}, 512);
  // One shared "registered" weight set; every request points at the same bytes.
  auto owner = std::make_shared<std::vector<uint8_t>>(Random(DType::kF32, 512 * 4 + 512, rng));
  auto run_lane = [&](int lane, int iters, uint64_t seed) {
    std::mt19937_64 r(seed);
    for (int it = 0; it < iters; ++it) {
      std::vector<std::unique_ptr<ConvBuffers>> reqs;
      for (int i = 0; i < 8; ++i) {
        reqs.push_back(MakeRequest(key, 1, 1 + it % 5, r));
        std::copy(owner->begin(), owner->begin() + 512 * 4 * 4, reqs.back()->weight.begin());
        std::copy(owner->begin() + 512 * 4 * 4, owner->end(), reqs.back()->bias.begin());
      }
      // Views of registered weights: same bytes, identified by cache_id.
      std::vector<ConvSegment> segs;
      for (auto& q : reqs) segs.push_back(q->Segment());
      for (auto& s : segs) {
        s.weight.data = owner->data();
        s.weight.owner = owner;
        s.weight.cache_id = 42;
        s.bias.data = owner->data() + 512 * 4 * 4;
        s.bias.owner = owner;
        s.bias.cache_id = 43;
      }
      std::vector<ConvBuffers> want;
      for (auto& q : reqs) {
        want.push_back(*q);
        ASSERT_TRUE(RunCpuConv(&want.back(), nullptr).ok());
      }
      std::vector<ConvSegment*> ptrs;
      for (auto& s : segs) ptrs.push_back(&s);
      BatchStats stats;
      ASSERT_TRUE(gpu.RunBatch(lane, key, absl::MakeSpan(ptrs), &stats).ok());
      for (size_t i = 0; i < reqs.size(); ++i) ExpectClose("y", key.x_dtype, reqs[i]->y, want[i].y);
    }
  };
  run_lane(0, 2, 1);  // warm-up: uploads the weights
  const int64_t allocations = gpu::AllocationCount();
  std::vector<std::thread> threads;
  for (int lane = 0; lane < gpu.num_lanes(); ++lane) {
    threads.emplace_back(run_lane, lane, 25, 100 + lane);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gpu::AllocationCount(), allocations)
      << "device or pinned memory was allocated on the request path";
  EXPECT_TRUE(gpu.Health().ok());
}

}  // namespace
}  // namespace conv1d

namespace conv1d {
namespace {

// Decode-session state slots in device memory: the slot operations agree
// with host slots, and fused update steps whose conv_state and
// conv_state_out are slots (read and written in place, nothing staged)
// match the CPU, step after step.
TEST_F(GpuBackendTest, SessionStepsReadAndWriteDeviceSlotsInPlace) {
  GpuBackendOptions opt;
  opt.lanes_per_device = 1;
  opt.host_pool_bytes = 16 << 20;
  auto gpu = GpuBackend::Create(opt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const Case c{Op::kUpdate, DType::kF32, DType::kF32, Layout::kChannelFirst, 4};
  const BatchKey key = KeyOf(c, 96);
  const int64_t b = 2, k = 6;  // a state longer than W-1: history kept for rollback
  StateSlotsOptions so;
  so.slot_bytes = b * key.dim * k * 4;
  so.num_slots = 3;
  auto slots = (*gpu)->CreateStateSlots(so);
  ASSERT_TRUE(slots.ok()) << slots.status();
  auto host = HostStateSlots::Create(so);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ((*slots)->SlotPlacement(1).kind, MemoryKind::kDeviceOwned);
  CONV1D_TEST_SEED_SCOPE(test_seed, 11);
  std::mt19937_64 rng(test_seed);
  // Slot operations against host slots.
  const std::vector<uint8_t> state0 = Random(DType::kF32, b * key.dim * k, rng);
  for (StateSlots* s : {slots->get(), static_cast<StateSlots*>(host->get())}) {
    ASSERT_TRUE(s->Write(0, 0, state0.data(), so.slot_bytes).ok());
    ASSERT_TRUE(s->Copy(0, 2, so.slot_bytes).ok());
    ASSERT_TRUE(s->ShiftRight(2, b * key.dim, k, 4, 2).ok());
  }
  std::vector<uint8_t> got(so.slot_bytes), want(so.slot_bytes);
  ASSERT_TRUE((*slots)->Read(2, 0, got.data(), so.slot_bytes).ok());
  ASSERT_TRUE((*host)->Read(2, 0, want.data(), so.slot_bytes).ok());
  EXPECT_EQ(got, want);

  // Three steps of two sessions (slots 0 and 1), fused, against the CPU.
  std::vector<std::unique_ptr<ConvBuffers>> cpu;
  for (int i = 0; i < 2; ++i) {
    cpu.push_back(MakeRequest(key, b, 1, rng, k));
    ASSERT_TRUE((*slots)->Write(i, 0, cpu[i]->conv_state.data(), so.slot_bytes).ok());
  }
  for (int step = 0; step < 3; ++step) {
    const int64_t s_tokens = 1 + step;  // mixed step sizes
    std::vector<ConvBuffers> want_step;
    std::vector<ConvSegment> segs;
    std::vector<std::vector<uint8_t>> ys;
    for (int i = 0; i < 2; ++i) {
      ConvBuffers& r = *cpu[i];
      r.seqlen = s_tokens;
      r.x = Random(DType::kF32, b * key.dim * s_tokens, rng);
      r.AllocateOutputs();
      want_step.push_back(r);
      ASSERT_TRUE(RunCpuConv(&want_step.back(), nullptr).ok());
      ConvSegment seg = r.Segment();
      seg.conv_state.data = (*slots)->SlotData(i);
      seg.conv_state.where = (*slots)->SlotPlacement(i);
      seg.conv_state_out.data = (*slots)->SlotData(i);
      seg.conv_state_out.where = seg.conv_state.where;
      segs.push_back(seg);
    }
    std::vector<ConvSegment*> ptrs = {&segs[0], &segs[1]};
    BatchStats stats;
    const absl::Status st = (*gpu)->RunBatch(0, key, absl::MakeSpan(ptrs), &stats);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(stats.launches, 1);
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " session " << i);
      ExpectClose("y", DType::kF32, cpu[i]->y, want_step[i].y);
      std::vector<uint8_t> state(so.slot_bytes);
      ASSERT_TRUE((*slots)->Read(i, 0, state.data(), so.slot_bytes).ok());
      ExpectClose("slot state", DType::kF32, state, want_step[i].conv_state_out);
      cpu[i]->conv_state = want_step[i].conv_state_out;  // the chain goes on
    }
  }
}

}  // namespace
}  // namespace conv1d
