// Lane batch layout: rounds, B-splitting, slot placement and limits.
#include "server/backends/gpu/batch_layout.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace conv1d::gpu {
namespace {

constexpr int64_t kEntry = 160;

BatchKey FwdKey(int64_t dim, int width) {
  BatchKey k;
  k.op = Op::kForward;
  k.x_dtype = DType::kF32;
  k.weight_dtype = DType::kF32;
  k.dim = dim;
  k.width = width;
  k.has_bias = true;
  k.has_initial_states = true;
  k.return_final_states = true;
  return k;
}

ConvSegment Seg(int64_t batch, int64_t seqlen) {
  ConvSegment s;
  s.batch = batch;
  s.seqlen = seqlen;
  return s;
}

int64_t NoWorkspace(const ConvSegment&, int64_t) { return 0; }

struct Interval {
  int64_t begin, end;
};

// Every slot of a round, as [begin, end) byte ranges.
std::vector<Interval> Slots(const BatchKey& key, const Round& r,
                            absl::Span<ConvSegment* const> segs) {
  std::vector<Interval> out;
  for (size_t p = 0; p < r.pieces.size(); ++p) {
    const PieceSlots& s = r.slots[p];
    for (int i = 0; i < kNumRoles; ++i) {
      const int64_t off = s[RoleAt(i)];
      if (off < 0) continue;
      out.push_back({off, off + StagedBytes(key, *segs[r.pieces[p].segment], RoleAt(i),
                                            r.pieces[p].b_count)});
    }
  }
  return out;
}

TEST(BatchLayoutTest, SmallBatchIsOneRoundWithAlignedDisjointSlots) {
  const BatchKey key = FwdKey(64, 4);
  std::vector<ConvSegment> segs = {Seg(1, 128), Seg(3, 7), Seg(2, 1)};
  std::vector<ConvSegment*> ptrs;
  for (auto& s : segs) ptrs.push_back(&s);
  bool on_device[3] = {false, false, false};
  auto rounds = PlanRounds(key, ptrs, absl::MakeConstSpan(on_device, 3),
                           {1 << 20, 1 << 20, kEntry, NoWorkspace});
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  const Round& r = (*rounds)[0];
  EXPECT_EQ(r.table_offset, 0);
  EXPECT_GE(r.table_bytes, 3 * kEntry);
  ASSERT_EQ(r.pieces.size(), 3u);
  std::vector<Interval> slots = Slots(key, r, ptrs);
  EXPECT_EQ(slots.size(), 3u * 6u);
  std::sort(slots.begin(), slots.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  EXPECT_GE(slots.front().begin, r.table_bytes);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(slots[i].begin % kSlotAlignBytes, 0);
    if (i > 0) {
      EXPECT_GE(slots[i].begin, slots[i - 1].end);
    }
  }
  // Inputs lie before input_end, outputs in [output_begin, output_end).
  for (size_t p = 0; p < r.pieces.size(); ++p) {
    EXPECT_LT(r.slots[p][Role::kX], r.input_end);
    EXPECT_LT(r.slots[p][Role::kInitialStates], r.input_end);
    EXPECT_GE(r.slots[p][Role::kY], r.output_begin);
    EXPECT_LT(r.slots[p][Role::kFinalStates], r.output_end);
  }
  EXPECT_LE(r.output_end, 1 << 20);
}

TEST(BatchLayoutTest, LargeRequestIsSplitAlongBatchCoveringEveryRowOnce) {
  const BatchKey key = FwdKey(256, 4);
  std::vector<ConvSegment> segs = {Seg(2, 100), Seg(37, 1000), Seg(1, 5)};
  std::vector<ConvSegment*> ptrs;
  for (auto& s : segs) ptrs.push_back(&s);
  bool on_device[3] = {false, false, false};
  const int64_t capacity = 4 << 20;  // one row of segment 1 is ~2 MiB in+out
  auto rounds = PlanRounds(key, ptrs, absl::MakeConstSpan(on_device, 3),
                           {capacity, 1 << 20, kEntry, NoWorkspace});
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  EXPECT_GT(rounds->size(), 10u);
  std::vector<int64_t> next_row(3, 0);
  for (const Round& r : *rounds) {
    EXPECT_LE(r.output_end, capacity);
    for (const Piece& p : r.pieces) {
      EXPECT_EQ(p.b_begin, next_row[p.segment]) << "rows in order, no gap";
      EXPECT_GE(p.b_count, 1);
      next_row[p.segment] += p.b_count;
    }
  }
  EXPECT_EQ(next_row, (std::vector<int64_t>{2, 37, 1}));
}

TEST(BatchLayoutTest, RowLargerThanLaneIsResourceExhaustedNamingTheLimit) {
  const BatchKey key = FwdKey(1024, 4);
  std::vector<ConvSegment> segs = {Seg(1, 1 << 20)};
  ConvSegment* p = &segs[0];
  bool on_device[1] = {false};
  auto rounds = PlanRounds(key, absl::MakeConstSpan(&p, 1),
                           absl::MakeConstSpan(on_device, 1),
                           {8 << 20, 1 << 20, kEntry, NoWorkspace});
  ASSERT_FALSE(rounds.ok());
  EXPECT_EQ(rounds.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(rounds.status().message().find("lane_buffer_bytes=8388608"),
            absl::string_view::npos)
      << rounds.status();
  EXPECT_GT(MinLaneBytesFor(key, segs[0], kEntry), 8 << 20);
}

TEST(BatchLayoutTest, MinLaneBytesIsEnoughForOneRow) {
  const BatchKey key = FwdKey(96, 3);
  ConvSegment s = Seg(5, 333);
  ConvSegment* p = &s;
  bool on_device[1] = {false};
  const int64_t need = MinLaneBytesFor(key, s, kEntry);
  auto rounds = PlanRounds(key, absl::MakeConstSpan(&p, 1),
                           absl::MakeConstSpan(on_device, 1),
                           {need, 1 << 20, kEntry, NoWorkspace});
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  EXPECT_EQ(rounds->size(), 5u);
  auto too_small = PlanRounds(key, absl::MakeConstSpan(&p, 1),
                              absl::MakeConstSpan(on_device, 1),
                              {need - kSlotAlignBytes, 1 << 20, kEntry, NoWorkspace});
  EXPECT_FALSE(too_small.ok());
}

TEST(BatchLayoutTest, CachedWeightsTakeNoSlot) {
  const BatchKey key = FwdKey(64, 4);
  std::vector<ConvSegment> segs = {Seg(1, 16), Seg(1, 16)};
  std::vector<ConvSegment*> ptrs = {&segs[0], &segs[1]};
  bool on_device[2] = {true, false};
  auto rounds = PlanRounds(key, ptrs, absl::MakeConstSpan(on_device, 2),
                           {1 << 20, 1 << 20, kEntry, NoWorkspace});
  ASSERT_TRUE(rounds.ok());
  const Round& r = (*rounds)[0];
  EXPECT_EQ(r.slots[0][Role::kWeight], -1);
  EXPECT_EQ(r.slots[0][Role::kBias], -1);
  EXPECT_GE(r.slots[1][Role::kWeight], 0);
  EXPECT_GE(r.slots[1][Role::kBias], 0);
}

TEST(BatchLayoutTest, BackwardStagesGradientsAndRespectsWorkspace) {
  BatchKey key = FwdKey(128, 4);
  key.op = Op::kBackward;
  key.return_final_states = false;
  key.has_dfinal_states = true;
  key.return_dinitial_states = true;
  std::vector<ConvSegment> segs = {Seg(8, 64), Seg(8, 64)};
  std::vector<ConvSegment*> ptrs = {&segs[0], &segs[1]};
  bool on_device[2] = {false, false};
  // 1 KiB of workspace per row, 10 KiB in all: at most 10 rows per round.
  auto ws = [](const ConvSegment&, int64_t rows) { return rows * 1024; };
  auto rounds = PlanRounds(key, ptrs, absl::MakeConstSpan(on_device, 2),
                           {64 << 20, 10 * 1024, kEntry, ws});
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  int64_t rows = 0;
  for (const Round& r : *rounds) {
    EXPECT_LE(r.workspace_bytes, 10 * 1024);
    for (size_t p = 0; p < r.pieces.size(); ++p) {
      rows += r.pieces[p].b_count;
      EXPECT_GE(r.slots[p][Role::kDout], 0);
      EXPECT_GE(r.slots[p][Role::kDfinalStates], 0);
      EXPECT_GE(r.slots[p][Role::kDx], r.output_begin);
      EXPECT_GE(r.slots[p][Role::kDweight], r.output_begin);
      EXPECT_GE(r.slots[p][Role::kDbias], r.output_begin);
      EXPECT_GE(r.slots[p][Role::kDinitialStates], r.output_begin);
      EXPECT_EQ(r.slots[p][Role::kY], -1);
    }
  }
  EXPECT_EQ(rows, 16);
  EXPECT_GE(rounds->size(), 2u);
}

}  // namespace
}  // namespace conv1d::gpu
