// Transfer plan: every role x memory kind x size x alignment decision of
// ChooseMove, and PlanTransfers' copy lists, runs and fallbacks, on the
// host (no device).
#include "server/backends/gpu/transfer_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/segment_check.h"

namespace conv1d::gpu {
namespace {

constexpr int64_t kDirect = 64 << 10;

MovePolicy Policy(bool copy_kernels, bool in_place) {
  MovePolicy p;
  p.direct_copy_bytes = kDirect;
  p.copy_kernels = copy_kernels;
  p.in_place = in_place;
  p.device = 0;
  return p;
}

Placement Kind(MemoryKind kind, int32_t device = -1) {
  Placement p;
  p.kind = kind;
  p.device = device;
  return p;
}

const void* Aligned() { return reinterpret_cast<const void*>(uintptr_t{4096}); }
const void* Misaligned() { return reinterpret_cast<const void*>(uintptr_t{4100}); }

struct Expect {
  MemoryKind kind;
  int64_t bytes;
  bool aligned;
  bool streams;       // piece streams in place
  bool copy_kernels;  // policy
  bool in_place;      // policy
  Move want;
};

TEST(ChooseMoveTest, ActivationsByKindSizeAlignmentAndPolicy) {
  const std::vector<Expect> cases = {
      // Heap memory is always staged.
      {MemoryKind::kHostHeap, 100, true, true, true, true, Move::kStage},
      {MemoryKind::kHostHeap, kDirect * 4, true, true, true, true, Move::kStage},
      // Page-locked, small: in place when the piece streams, the policy
      // allows and the address is 16-byte aligned; else the copy kernel.
      {MemoryKind::kHostPinned, 100, true, true, true, true, Move::kInPlace},
      {MemoryKind::kHostPinned, 100, false, true, true, true, Move::kCopyKernel},
      {MemoryKind::kHostPinned, 100, true, false, true, true, Move::kCopyKernel},
      {MemoryKind::kHostPinned, 100, true, true, true, false, Move::kCopyKernel},
      {MemoryKind::kHostPinned, 100, true, true, false, false, Move::kStage},
      // Page-locked, large: its own DMA, also when the piece streams.
      {MemoryKind::kHostPinned, kDirect, true, true, true, true, Move::kDma},
      {MemoryKind::kHostPinned, kDirect, false, false, false, false, Move::kDma},
      // Registered shared memory is page-locked: the same choices.
      {MemoryKind::kSharedHost, 100, true, true, true, true, Move::kInPlace},
      {MemoryKind::kSharedHost, 100, true, false, true, false, Move::kCopyKernel},
      {MemoryKind::kSharedHost, kDirect * 2, true, false, true, true, Move::kDma},
      // Device memory is read and written where it is, whatever its size.
      {MemoryKind::kDeviceOwned, 100, false, false, false, false, Move::kInPlace},
      {MemoryKind::kDeviceOwned, kDirect * 8, true, false, false, false, Move::kInPlace},
      {MemoryKind::kSharedDevice, kDirect * 8, true, true, true, true, Move::kInPlace},
  };
  for (Role role : {Role::kX, Role::kDout, Role::kInitialStates, Role::kDfinalStates,
                    Role::kConvState, Role::kY, Role::kFinalStates, Role::kDx,
                    Role::kDinitialStates, Role::kConvStateOut}) {
    for (const Expect& e : cases) {
      SCOPED_TRACE(testing::Message() << RoleName(role) << " " << MemoryKindName(e.kind) << " "
                                      << e.bytes << " aligned=" << e.aligned
                                      << " streams=" << e.streams);
      const Move got = ChooseMove(role, /*used=*/true, /*present=*/true, Kind(e.kind, 0),
                                  e.aligned ? Aligned() : Misaligned(), e.bytes,
                                  /*convert_weights=*/false, PieceFacts{e.streams, false},
                                  Policy(e.copy_kernels, e.in_place));
      EXPECT_EQ(got, e.want) << MoveName(got) << " != " << MoveName(e.want);
    }
  }
}

TEST(ChooseMoveTest, WeightsNeverStayInHostMemory) {
  for (Role role : {Role::kWeight, Role::kBias}) {
    const MovePolicy policy = Policy(true, true);
    const PieceFacts streams{true, false};
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kHostPinned), Aligned(), 100, false,
                         streams, policy),
              Move::kCopyKernel);
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kHostHeap), Aligned(), 100, false,
                         streams, policy),
              Move::kStage);
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kHostPinned), Aligned(), kDirect,
                         false, streams, policy),
              Move::kDma);
    // Resident beats everything; conversion beats host moves.
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kHostHeap), Aligned(), 100, true,
                         PieceFacts{true, true}, policy),
              Move::kResident);
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kHostPinned), Aligned(), 100, true,
                         streams, policy),
              Move::kConvert);
    // Device weights are read where they are.
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kDeviceOwned, 0), Aligned(), 100,
                         false, streams, policy),
              Move::kInPlace);
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kSharedDevice, 0), Aligned(), 100,
                         false, streams, policy),
              Move::kInPlace);
    // ... unless the kernels need them in another dtype: then converted by
    // the host like any other.
    EXPECT_EQ(ChooseMove(role, true, true, Kind(MemoryKind::kSharedDevice, 0), Aligned(), 100,
                         true, streams, policy),
              Move::kConvert);
  }
}

TEST(ChooseMoveTest, UnusedAbsentAndGradients) {
  const MovePolicy policy = Policy(true, true);
  const Placement heap = Kind(MemoryKind::kHostHeap);
  for (int i = 0; i < kNumRoles; ++i) {
    EXPECT_EQ(ChooseMove(RoleAt(i), false, true, heap, Aligned(), 8, false, {}, policy),
              Move::kNone);
  }
  EXPECT_EQ(ChooseMove(Role::kFinalStates, true, false, heap, nullptr, 8, false, {}, policy),
            Move::kDiscard);
  EXPECT_EQ(ChooseMove(Role::kInitialStates, true, false, heap, nullptr, 8, false, {}, policy),
            Move::kNone);
  for (Role r : {Role::kDweight, Role::kDbias}) {
    EXPECT_EQ(ChooseMove(r, true, true, Kind(MemoryKind::kHostPinned), Aligned(), 8, false, {},
                         policy),
              Move::kHostReduce);
  }
}

// A forward batch of three requests: heap, small page-locked and large
// page-locked tensors, planned over one round.
struct ForwardBatch {
  BatchKey key;
  std::vector<std::vector<uint8_t>> memory;
  std::vector<ConvSegment> segs;
  std::vector<ConvSegment*> ptrs;

  ForwardBatch() {
    key.op = Op::kForward;
    key.dim = 16;
    key.width = 4;
    key.has_bias = true;
    key.has_initial_states = true;
    key.return_final_states = true;
    Add(2, 8, MemoryKind::kHostHeap);
    Add(1, 4, MemoryKind::kHostPinned);
    Add(2, 2048, MemoryKind::kHostPinned);
    for (ConvSegment& s : segs) ptrs.push_back(&s);
  }

  void Add(int64_t batch, int64_t seqlen, MemoryKind kind) {
    ConvSegment s;
    s.batch = batch;
    s.seqlen = seqlen;
    for (int i = 0; i < kNumRoles; ++i) {
      const Role r = RoleAt(i);
      if (!key.roles().has(r)) continue;
      memory.emplace_back(RoleBytes(key, s, r, batch) + 16);
      // Keep every buffer 16-byte aligned.
      auto* base = memory.back().data();
      auto* p = base + (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
      const bool weights = r == Role::kWeight || r == Role::kBias;
      if (IsInput(r)) {
        s.input(r).data = p;
        s.input(r).bytes = RoleBytes(key, s, r, batch);
        s.input(r).where.kind = weights ? MemoryKind::kHostHeap : kind;
      } else {
        s.output(r).data = p;
        s.output(r).bytes = RoleBytes(key, s, r, batch);
        s.output(r).where.kind = kind;
      }
    }
    EXPECT_TRUE(ValidateSegment(key, s).ok());
    segs.push_back(s);
  }
};

int64_t Bytes(const std::vector<LaneCopy>& v) {
  int64_t n = 0;
  for (const LaneCopy& c : v) n += c.bytes;
  return n;
}

TEST(PlanTransfersTest, EachTensorGoesOneWayAndRunsMerge) {
  ForwardBatch b;
  const bool resident[3] = {false, false, false};
  LayoutOptions layout{64 << 20, 1 << 20, 256,
                       [](const ConvSegment&, int64_t) { return int64_t{0}; }};
  auto rounds = PlanRounds(b.key, b.ptrs, resident, layout);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  const Round& round = (*rounds)[0];
  const std::vector<PieceFacts> facts = {{true, false}, {true, false}, {false, false}};
  auto plan = PlanTransfers(b.key, b.ptrs, round, facts, Policy(true, true), CopyKernelLimits{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Request 0 (heap): every tensor staged, weights included.
  for (Role r : {Role::kX, Role::kWeight, Role::kBias, Role::kInitialStates}) {
    EXPECT_EQ(plan->tensors[0][RoleIndex(r)].move, Move::kStage) << RoleName(r);
  }
  EXPECT_EQ(plan->tensors[0][RoleIndex(Role::kY)].move, Move::kStage);
  // Request 1 (small, page-locked, streams): activations and states in
  // place, at the request's own address; heap weights staged.
  for (Role r : {Role::kX, Role::kInitialStates, Role::kY, Role::kFinalStates}) {
    const RoundPlan::Tensor& t = plan->tensors[1][RoleIndex(r)];
    EXPECT_EQ(t.move, Move::kInPlace) << RoleName(r);
    EXPECT_EQ(t.external, b.segs[1].data(r));
    EXPECT_EQ(t.lane_offset, -1);
  }
  // Request 2 (large, page-locked): x and y by DMA, states by copy kernel.
  EXPECT_EQ(plan->tensors[2][RoleIndex(Role::kX)].move, Move::kDma);
  EXPECT_EQ(plan->tensors[2][RoleIndex(Role::kY)].move, Move::kDma);
  EXPECT_EQ(plan->tensors[2][RoleIndex(Role::kInitialStates)].move, Move::kCopyKernel);
  EXPECT_EQ(plan->tensors[2][RoleIndex(Role::kFinalStates)].move, Move::kCopyKernel);
  // Byte accounting: in place of request 1, the DMA lists, the copy kernels.
  const ConvSegment& s1 = b.segs[1];
  EXPECT_EQ(plan->in_place_in_bytes, s1.x.bytes + s1.initial_states.bytes);
  EXPECT_EQ(plan->in_place_out_bytes, s1.y.bytes + s1.final_states.bytes);
  EXPECT_EQ(Bytes(plan->dma_in), b.segs[2].x.bytes);
  EXPECT_EQ(Bytes(plan->dma_out), b.segs[2].y.bytes);
  EXPECT_EQ(Bytes(plan->gather), b.segs[2].initial_states.bytes);
  EXPECT_EQ(Bytes(plan->scatter), b.segs[2].final_states.bytes);
  // The table leads the H2D runs; runs are sorted, disjoint and merged.
  ASSERT_FALSE(plan->h2d_runs.empty());
  EXPECT_EQ(plan->h2d_runs[0].lane_offset, 0);
  for (const auto* runs : {&plan->h2d_runs, &plan->d2h_runs}) {
    for (size_t i = 1; i < runs->size(); ++i) {
      EXPECT_GE((*runs)[i].lane_offset - ((*runs)[i - 1].lane_offset + (*runs)[i - 1].bytes),
                kSlotAlignBytes);
    }
  }
  // Every staged input is packed into its own slot.
  for (const LaneCopy& c : plan->pack) EXPECT_GE(c.lane_offset, round.table_bytes);
}

TEST(PlanTransfersTest, FullCopyTablesFallBackToStaging) {
  ForwardBatch b;
  const bool resident[3] = {false, false, false};
  LayoutOptions layout{64 << 20, 1 << 20, 256,
                       [](const ConvSegment&, int64_t) { return int64_t{0}; }};
  auto rounds = PlanRounds(b.key, b.ptrs, resident, layout);
  ASSERT_TRUE(rounds.ok());
  const std::vector<PieceFacts> facts(3);
  CopyKernelLimits tiny;
  tiny.chunk_bytes = 64;
  tiny.table_entries = 2;  // one state tensor of request 1 at most
  auto plan = PlanTransfers(b.key, b.ptrs, (*rounds)[0], facts, Policy(true, false), tiny);
  ASSERT_TRUE(plan.ok());
  EXPECT_LE(plan->gather_chunks, 2);
  EXPECT_LE(plan->scatter_chunks, 2);
  int staged = 0;
  for (const auto& piece : plan->tensors) {
    for (const RoundPlan::Tensor& t : piece) staged += t.move == Move::kStage;
  }
  EXPECT_GT(staged, 4);  // request 0's and the overflow
}

TEST(PlanTransfersTest, DeviceMemoryOfAnotherDeviceIsRefused) {
  ForwardBatch b;
  b.segs[1].x.where = Kind(MemoryKind::kDeviceOwned, 1);
  const bool resident[3] = {false, false, false};
  LayoutOptions layout{64 << 20, 1 << 20, 256,
                       [](const ConvSegment&, int64_t) { return int64_t{0}; }};
  auto rounds = PlanRounds(b.key, b.ptrs, resident, layout);
  ASSERT_TRUE(rounds.ok());
  auto plan = PlanTransfers(b.key, b.ptrs, (*rounds)[0], std::vector<PieceFacts>(3),
                            Policy(true, true), CopyKernelLimits{});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("x lives in memory of device 1"), std::string::npos)
      << plan.status();
  // On its own device it is read in place.
  b.segs[1].x.where.device = 0;
  plan = PlanTransfers(b.key, b.ptrs, (*rounds)[0], std::vector<PieceFacts>(3),
                       Policy(true, true), CopyKernelLimits{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tensors[1][RoleIndex(Role::kX)].move, Move::kInPlace);
}

TEST(PlanTransfersTest, BackwardGradientsComeBackForTheHost) {
  BatchKey key;
  key.op = Op::kBackward;
  key.dim = 8;
  key.width = 3;
  key.has_bias = true;
  ConvSegment s;
  s.batch = 2;
  s.seqlen = 5;
  std::vector<std::vector<uint8_t>> memory;
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    if (!key.roles().has(r)) continue;
    memory.emplace_back(RoleBytes(key, s, r, s.batch));
    if (IsInput(r)) {
      s.input(r).data = memory.back().data();
      s.input(r).bytes = memory.back().size();
    } else {
      s.output(r).data = memory.back().data();
      s.output(r).bytes = memory.back().size();
    }
  }
  ConvSegment* ptr = &s;
  const bool resident[1] = {false};
  LayoutOptions layout{1 << 20, 1 << 20, 256,
                       [](const ConvSegment&, int64_t) { return int64_t{0}; }};
  auto rounds = PlanRounds(key, {&ptr, 1}, resident, layout);
  ASSERT_TRUE(rounds.ok());
  auto plan = PlanTransfers(key, {&ptr, 1}, (*rounds)[0], std::vector<PieceFacts>(1),
                            Policy(true, true), CopyKernelLimits{});
  ASSERT_TRUE(plan.ok());
  for (Role r : {Role::kDweight, Role::kDbias}) {
    const RoundPlan::Tensor& t = plan->tensors[0][RoleIndex(r)];
    EXPECT_EQ(t.move, Move::kHostReduce);
    EXPECT_EQ(t.lane_offset, (*rounds)[0].slots[0][r]);
  }
  // Their fp32 partials come back by D2H runs, never unpacked as such.
  int64_t d2h = 0;
  for (const LaneCopy& c : plan->d2h_runs) d2h += c.bytes;
  EXPECT_GE(d2h, (8 * 3 + 8) * 4);
  for (const LaneCopy& c : plan->unpack) {
    EXPECT_NE(c.host, s.dweight.data);
    EXPECT_NE(c.host, s.dbias.data);
  }
}

}  // namespace
}  // namespace conv1d::gpu
