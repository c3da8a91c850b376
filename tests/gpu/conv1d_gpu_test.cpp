// GPU kernel tests: every op against the float64 reference over dtype
// pairs, layouts, widths and odd lengths; ragged fused launches against
// separate calls; misaligned pointers; tensors past 2^31 elements;
// bitwise-deterministic dweight. Skips itself without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "server/core/dtype.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/common/reference.h"

namespace conv1d::testing {
namespace {

using kernels::KernelActivation;
using kernels::KernelLayout;
using kernels::KernelOp;

void SweepOp(KernelOp op) {
  std::mt19937_64 rng = TestRng();
  const int widths[] = {2, 3, 4, 7, 33};
  const int64_t lengths[] = {1, 3, 129};
  uint32_t n = 0;
  for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
    for (const Pair& pr : kPairs) {
      for (int W : widths) {
        for (int64_t L : lengths) {
          ++n;
          const int64_t D = (n % 2) ? 8 : 5;
          // Cycle the optional features so every one is on and off often.
          const uint32_t bits = (n * 0x9e37u) >> 3 ^ n;
          const Conv1dProblem p = MakeProblem(op, pr, layout, D, W, bits);
          EXPECT_EQ(RunOneSegment(p, 2, L, rng), "");
        }
      }
    }
  }
}

TEST(Conv1dGpu, ForwardSweep) {
  REQUIRE_DEVICE();
  SweepOp(KernelOp::kForward);
}

TEST(Conv1dGpu, BackwardSweep) {
  REQUIRE_DEVICE();
  SweepOp(KernelOp::kBackward);
}

TEST(Conv1dGpu, LongRows) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (Pair pr : {kPairs[0], kPairs[2]}) {
        for (int W : {4, 33}) {
          const Conv1dProblem p = MakeProblem(op, pr, layout, 3, W, 0x1f);
          EXPECT_EQ(RunOneSegment(p, 1, 1000003, rng), "");
        }
      }
    }
  }
}

TEST(Conv1dGpu, Update) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
    for (const Pair& pr : kPairs) {
      for (int W : {2, 4, 7}) {
        for (int64_t S : {1, 3}) {
          for (int extra : {0, 3}) {
            ++n;
            const Conv1dProblem p = MakeProblem(KernelOp::kUpdate, pr, layout, 6, W, n * 7);
            std::vector<SegmentData> segs(2);
            for (int i = 0; i < 2; ++i) {
              segs[i].batch = 1 + i * 2;
              segs[i].seqlen = S;
              segs[i].state_len = W - 1 + extra + i;
              MakeInputs(p, &segs[i], rng);
              if ((n + i) % 2) segs[i].state_out = HostTensor();  // in place
            }
            ASSERT_EQ(RunFused(p, &segs), "") << Describe(p, segs);
            EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
          }
        }
      }
    }
  }
}

// Decode steps on the update's vector path (one token, state_len = W-1,
// D a multiple of 8): a thread updates 16 bytes of x worth of rows. One
// launch mixes such segments with one that takes the per-row path (three
// tokens), in place and not, with and without bias, every dtype pair.
TEST(Conv1dGpu, UpdateVectorRows) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (const Pair& pr : kPairs) {
    for (int W : {2, 3, 4}) {
      for (uint32_t bits : {0x3u, 0x0u}) {
        ++n;
        const Conv1dProblem p =
            MakeProblem(KernelOp::kUpdate, pr, KernelLayout::kChannelFirst, 40, W, bits);
        std::vector<SegmentData> segs(3);
        for (int i = 0; i < 3; ++i) {
          segs[i].batch = 1 + i * 3;
          segs[i].seqlen = i == 1 ? 3 : 1;
          segs[i].state_len = W - 1;
          MakeInputs(p, &segs[i], rng);
          if ((n + i) % 2) segs[i].state_out = HostTensor();  // in place
        }
        ASSERT_EQ(RunFused(p, &segs), "") << Describe(p, segs);
        EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
      }
    }
  }
}

// Channel-first backward on the 16-byte vector path with several chunks per
// row: interior (full) tiles, a row ending exactly at a chunk end, a partial
// last chunk, and the states that send the first and last chunks to the
// general tile code.
TEST(Conv1dGpu, BackwardVectorChunks) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : kPairs) {
    for (int W : {2, 3, 4}) {
      for (uint32_t bits : {0x0u, 0x1u, 0x3u, 0x1fu, 0x39u}) {
        for (int64_t L : {int64_t{1024}, int64_t{4096}, int64_t{4096 + 40}}) {
          const Conv1dProblem p =
              MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 3, W, bits);
          EXPECT_EQ(RunOneSegment(p, 2, L, rng), "");
        }
      }
    }
  }
}

// 16-bit channel-first backward on long rows with enough of them (B * D >=
// 16384) that each team walks many steps of a row: one chunk of 16 steps
// holding both ends of the row (dinitial_states and dfinal_states), and two
// chunks of 9 steps whose last step has a single vector inside the row.
TEST(Conv1dGpu, BackwardLongRowSteps) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[2], 4, 0x1f, 4096},
                        {kPairs[1], 3, 0x39, 4360},
                        {kPairs[4], 2, 0x0, 4360}};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p =
        MakeProblem(KernelOp::kBackward, c.pr, KernelLayout::kChannelFirst, 8192, c.W, c.bits);
    EXPECT_EQ(RunOneSegment(p, 2, c.L, rng), "");
  }
}

// fp32 channel-first backward on long rows (bwd_cf_stream_kernel): the
// halo within a 4-element vector (W = 2, 4), a whole vector (W = 5) and
// from two lanes (W = 6, 8). Rows of 32 steps of 128 elements (one chunk
// holding both row ends), and of 33 steps (chunks of 17 and 16 steps, the
// last step a single vector inside the row), with SiLU, bias and every
// state tensor on and off.
TEST(Conv1dGpu, BackwardFp32LongRowSteps) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (int W : {2, 4, 5, 6, 8}) {
    for (uint32_t bits : {0x1fu, 0x0u}) {
      for (int64_t L : {int64_t{4096}, int64_t{4096 + 4}}) {
        const Conv1dProblem p =
            MakeProblem(KernelOp::kBackward, kPairs[0], KernelLayout::kChannelFirst, 96, W, bits);
        EXPECT_EQ(RunOneSegment(p, 2, L, rng), "") << "W=" << W << " L=" << L << " bits=" << bits;
      }
    }
  }
}

// 16-bit forward on long rows (fwd_cf_stream_kernel), 16384 rows of 16
// steps of 256 elements (initial and final states), of 18 steps whose last
// has a single vector inside the row (final states; chunks of 6 or 9 steps
// depending on CONV1D_FWD_STREAM_STEPS), and of two steps, the second with
// one vector (both row ends in one chunk, initial and final states).
TEST(Conv1dGpu, ForwardLongRowSteps) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[2], 4, 0x1f, 4096},
                        {kPairs[1], 3, 0x0f, 4360},
                        {kPairs[4], 2, 0x0, 4360},
                        {kPairs[2], 4, 0x0e, 264}};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p =
        MakeProblem(KernelOp::kForward, c.pr, KernelLayout::kChannelFirst, 8192, c.W, c.bits);
    EXPECT_EQ(RunOneSegment(p, 2, c.L, rng), "");
  }
}

// 16-bit long rows. Backward: the B rows of a channel walked by one team
// (walked: 4 x 8 steps; 3 x 9 steps whose last has one vector inside the
// row; one row of 16 steps) and rows too many for a walk (17 x 8 steps,
// past the walk's 128; a chunk per row). Forward: the same shapes.
TEST(Conv1dGpu, StreamChannelWalk) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  struct Shape {
    int64_t B, L;
  };
  const Shape shapes[] = {{4, 2048}, {3, 2056}, {17, 2048}, {1, 4096}};
  uint32_t n = 0;
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (const Pair& pr : {kPairs[2], kPairs[1], kPairs[4]}) {
      for (int W : {2, 3, 4}) {
        for (const Shape& sh : shapes) {
          ++n;
          const uint32_t bits = (n % 3 == 0) ? 0x3fu : (n % 3 == 1) ? 0x1u : 0x1au;
          const Conv1dProblem p = MakeProblem(op, pr, KernelLayout::kChannelFirst, 25, W, bits);
          EXPECT_EQ(RunOneSegment(p, sh.B, sh.L, rng), "");
        }
      }
    }
  }
}

// Short channel-first rows on the vector path (fwd/bwd_cf_short_kernel):
// enough rows in one launch (D = 4099, 16 requests) that a tile walks many
// steps, rows of 1 to 32 vectors (1 to 8 lanes per row, several rows per
// step), B = 1 (dweight stored directly) and B > 1 (partials), a last tile
// with fewer rows; then three of the requests alone (fewer steps per tile)
// give the same bytes.
TEST(Conv1dGpu, ShortRowTiles) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[0], 4, 0x1f}, {kPairs[2], 3, 0x39}, {kPairs[1], 2, 0x0}, {kPairs[4], 4, 0x0f}};
  const int64_t shapes[][2] = {{1, 128}, {1, 128}, {1, 8},  {1, 128}, {1, 24},  {1, 128},
                               {2, 64},  {1, 128}, {1, 48}, {1, 128}, {3, 128}, {1, 128},
                               {1, 256}, {1, 128}, {1, 16}, {1, 128}};
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (const FeatureCase& c : cases) {
      const Conv1dProblem p = MakeProblem(op, c.pr, KernelLayout::kChannelFirst, 4099, c.W, c.bits);
      ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, shapes, rng), {0, 2, 10}));
    }
  }
}

// Which segments the kernel moves in whole-line passes (what lets the GPU
// backend leave their tensors in host memory): the forward's short scalar
// rows only. Host code; needs no device.
TEST(Conv1dGpu, StreamsInPlaceOnlyForShortForwardRowsAndVectorUpdates) {
  auto problem = [](KernelOp op, ScalarType t, KernelLayout layout, int W, int64_t D = 64) {
    return MakeProblem(op, Pair{t, t}, layout, D, W, 0x0c);
  };
  const auto f32 = ScalarType::kF32, bf16 = ScalarType::kBF16;
  const auto cf = KernelLayout::kChannelFirst, cl = KernelLayout::kChannelLast;
  for (int64_t L : {1, 2, 3, 5, 31}) {
    EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 4), L, 0)) << L;
    EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 2), L, 0)) << L;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kBackward, f32, cf, 4), L, 0)) << L;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cl, 4), L, 0)) << L;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 9), L, 0)) << L;
    // fp32 at W 5..8: the halo exceeds a vector, short rows are scalar.
    EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 8), L, 0)) << L;
  }
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 8), 64, 0));
  EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 8), 64, 0));
  // Short vector rows: whole 16-byte vectors, at most one per lane.
  for (int64_t L : {4, 8, 32, 64, 128}) {
    EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 4), L, 0)) << L;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kBackward, f32, cf, 4), L, 0)) << L;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cl, 4), L, 0)) << L;
  }
  // Rows longer than a team of scalars or of vectors.
  for (int64_t L : {33, 129, 132, 1000}) {
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, f32, cf, 4), L, 0)) << L;
  }
  EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 4), 12, 0));
  EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 4), 16, 0));
  EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 4), 256, 0));
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 4), 36, 0));
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kForward, bf16, cf, 4), 264, 0));
  // The update: one token, the minimal state, D in whole vectors, W 2..8,
  // in either layout.
  for (int W : {2, 3, 4, 7, 8}) {
    for (KernelLayout layout : {cf, cl}) {
      EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, layout, W), 1, W - 1)) << W;
      EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, bf16, layout, W), 1, W - 1)) << W;
    }
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, cf, W), 2, W - 1)) << W;
    EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, cf, W), 1, W)) << W;
  }
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, cf, 9), 1, 8));
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, cf, 4, 66), 1, 3));
  EXPECT_FALSE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, bf16, cf, 4, 68), 1, 3));
  EXPECT_TRUE(Conv1dStreamsInPlace(problem(KernelOp::kUpdate, f32, cf, 4, 68), 1, 3));
}

// Short scalar rows (lengths 1..31 that are not whole vectors, so one
// element per lane, a tile of up to 32 rows staged through shared memory):
// every dtype pair, W = 2..4, rows shorter and longer than W-1, states and
// bias/SiLU on and off, D = 37 so tiles end inside a batch row and a launch
// mixes lengths. Matches the reference; requests alone give the same bytes.
TEST(Conv1dGpu, ShortScalarRowsForward) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const int64_t shapes[][2] = {{3, 1}, {1, 2}, {2, 3}, {1, 5}, {4, 7}, {1, 1}, {2, 17}, {1, 31}};
  for (const Pair& pr : kPairs) {
    for (int W : {2, 3, 4}) {
      for (uint32_t bits : {0x0fu, 0x0cu, 0x03u}) {
        const Conv1dProblem p =
            MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelFirst, 37, W, bits);
        ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, shapes, rng), {0, 3, 7}));
      }
    }
  }
}

// Short-row forward of a launch of about 240000 rows (D = 1000, so tiles
// end inside a request) with a long-row request in between: rows of 1 to
// 32 vectors, every dtype pair, W = 2..4, every feature on and off.
// Matches the reference, and every request run alone gives the same bytes.
TEST(Conv1dGpu, ShortRowForwardLargeLaunch) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[0], 4, 0x0f}, {kPairs[1], 3, 0x0b}, {kPairs[2], 4, 0x0d},
                               {kPairs[3], 2, 0x0e}, {kPairs[4], 3, 0x07}, {kPairs[2], 2, 0x00}};
  const int64_t shapes[][2] = {{3, 128}, {1, 200}, {2, 8},  {1, 40},  {4, 256}, {1, 1024},
                               {2, 16},  {1, 96},  {3, 72}, {1, 136}, {2, 248}, {20, 128},
                               {200, 8}, {1, 64}};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p = MakeProblem(KernelOp::kForward, c.pr, KernelLayout::kChannelFirst, 1000, c.W, c.bits);
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, shapes, rng), {1, 3, 9}));
  }
}

// Short-row backward with more rows than the device's teams hold at one
// tile each (about 129000 rows, D = 2051): in 16-bit types each team walks
// a run of many tiles, its rows in several weight groups, and some runs
// cross from one request to the next or over a long-row request in
// between (fp32 keeps one tile per team); B = 1 and
// B > 1, states in and out, fp32 and bf16 with and without SiLU. Matches
// the reference, and two requests alone give the same bytes.
TEST(Conv1dGpu, ShortRowLongRuns) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[0], 4, 0x1f}, {kPairs[2], 4, 0x1b}, {kPairs[2], 3, 0x1e}, {kPairs[4], 4, 0x03}};
  std::vector<std::array<int64_t, 2>> shapes;
  for (int i = 0; i < 48; ++i) shapes.push_back({i % 3 == 1 ? 2 : 1, i % 5 == 3 ? 64 : 128});
  shapes[17] = {1, 256};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p = MakeProblem(KernelOp::kBackward, c.pr, KernelLayout::kChannelFirst, 2051, c.W, c.bits);
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, shapes, rng), {1, 20}));
  }
}

// Channel-last fast path on the vector path with several channel blocks
// (D = 264: the last block partial) and several time chunks per row: a row
// ending inside a thread's walk, one ending 2 steps past a block of time
// chunks, initial states, dfinal_states and dinitial_states, every dtype.
TEST(Conv1dGpu, ChannelLastChunks) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[0], 4, 0x1f, 1000}, {kPairs[2], 4, 0x1f, 2050},
                        {kPairs[1], 3, 0x0f, 2050}, {kPairs[4], 2, 0x1d, 1000},
                        {kPairs[0], 2, 0x00, 2050}, {kPairs[2], 3, 0x02, 300}};
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (const FeatureCase& c : cases) {
      const Conv1dProblem p = MakeProblem(op, c.pr, KernelLayout::kChannelLast, 264, c.W, c.bits);
      EXPECT_EQ(RunOneSegment(p, 2, c.L, rng), "");
    }
  }
}

// 100 requests of random B, L and weights in one launch give the same bytes
// as 100 separate launches, and match the reference.
TEST(Conv1dGpu, RaggedHundredEqualsSeparate) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  std::uniform_int_distribution<int64_t> bdist(1, 3), ldist(1, 300);
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (Pair pr : {kPairs[0], kPairs[2]}) {
        for (int W : {4, 5}) {
          const Conv1dProblem p = MakeProblem(op, pr, layout, 16, W, 0x1f);
          std::vector<SegmentData> segs(100);
          for (auto& s : segs) {
            s.batch = bdist(rng);
            s.seqlen = ldist(rng) * (rng() % 10 == 0 ? 7 : 1);
            MakeInputs(p, &s, rng);
          }
          ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, EveryNth(segs.size(), 1)));
        }
      }
    }
  }
}

TEST(Conv1dGpu, MisalignedPointersTakeScalarPath) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (Pair pr : {kPairs[0], kPairs[2]}) {
        const Conv1dProblem p = MakeProblem(op, pr, layout, 16, 4, 0x1f);
        std::vector<SegmentData> segs(2);
        for (auto& s : segs) {
          s.batch = 2;
          s.seqlen = 256;
          MakeInputs(p, &s, rng);
        }
        ASSERT_EQ(RunFused(p, &segs, /*misalign=*/true), "") << Describe(p, segs);
        EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
      }
    }
  }
}

// dweight/dbias are bitwise equal across runs (and across repeated runs on
// one workspace).
TEST(Conv1dGpu, DweightDeterministic) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
    for (int W : {4, 9}) {
      const Conv1dProblem p = MakeProblem(KernelOp::kBackward, kPairs[0], layout, 64, W, 0x1f);
      std::vector<SegmentData> segs(3);
      for (auto& s : segs) {
        s.batch = 4;
        s.seqlen = 4099;
        MakeInputs(p, &s, rng);
      }
      std::vector<SegmentData> a = segs, b = segs;
      ASSERT_EQ(RunFused(p, &a), "");
      ASSERT_EQ(RunFused(p, &b, false, /*repeats=*/3), "");
      EXPECT_EQ(CheckAll(p, b), "") << Describe(p, segs);
      for (size_t i = 0; i < segs.size(); ++i) {
        EXPECT_EQ(a[i].dweight.bytes, b[i].dweight.bytes) << "segment " << i;
        EXPECT_EQ(a[i].dbias.bytes, b[i].dbias.bytes) << "segment " << i;
      }
    }
  }
}

double HugeX(const void* ctx, int64_t b, int64_t d, int64_t t);

struct HugeCtx {
  const SegmentData* seg;
  int64_t D, L;
  bool cl;
};

double HugeX(const void* ctx, int64_t b, int64_t d, int64_t t) {
  const auto* c = static_cast<const HugeCtx*>(ctx);
  const int64_t i = c->cl ? (b * c->L + t) * c->D + d : (b * c->D + d) * c->L + t;
  uint16_t h;
  std::memcpy(&h, c->seg->x.bytes.data() + 2 * i, 2);
  return BF16ToFloat(h);
}

// A bf16 forward over 2^31 + 2^20 elements in each layout: every output
// written, spot checks across the whole tensor, including past 2^31.
TEST(Conv1dGpu, TensorPast2To31Elements) {
  REQUIRE_DEVICE();
  for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
    Conv1dProblem p = MakeProblem(KernelOp::kForward, kPairs[2], layout, 4, 4, 0x3);
    std::vector<SegmentData> segs(1);
    SegmentData& s = segs[0];
    s.batch = 2;
    s.seqlen = ((int64_t{1} << 31) + (int64_t{1} << 20)) / (2 * 4);
    const int64_t n = s.batch * p.dim * s.seqlen;
    std::mt19937_64 rng = TestRng();
    s.weight = RandomTensor(p.weight_type, p.dim * p.width, 0.5, rng);
    s.bias = RandomTensor(p.weight_type, p.dim, 0.5, rng);
    s.x.type = s.y.type = ScalarType::kBF16;
    s.x.n = s.y.n = n;
    s.x.bytes.resize(2 * n);
    s.y.bytes.assign(2 * n, 0xff);
    const uint64_t seed = rng();
    std::vector<std::thread> th;
    const int nt = 16;
    for (int k = 0; k < nt; ++k) {
      th.emplace_back([&, k] {
        std::mt19937_64 r(seed + k);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (int64_t i = n * k / nt; i < n * (k + 1) / nt; ++i) {
          const uint16_t h = FloatToBF16(u(r));
          std::memcpy(s.x.bytes.data() + 2 * i, &h, 2);
        }
      });
    }
    for (auto& t : th) t.join();
    ASSERT_EQ(RunFused(p, &segs), "");
    const auto* yb = reinterpret_cast<const uint16_t*>(s.y.bytes.data());
    int64_t unwritten = 0;
    for (int64_t i = 0; i < n; ++i) unwritten += (yb[i] == 0xffff);
    EXPECT_EQ(unwritten, 0);
    const HugeCtx ctx{&s, p.dim, s.seqlen, layout == KernelLayout::kChannelLast};
    // The shape, weights and bias; x is read through HugeX, not copied.
    ref::Inputs r;
    r.batch = s.batch;
    r.dim = p.dim;
    r.seqlen = s.seqlen;
    r.width = p.width;
    r.channel_last = ctx.cl;
    r.silu = p.activation == KernelActivation::kSiLU;
    r.weight = s.weight.Values();
    r.bias = s.bias.Values();
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    int bad = 0;
    for (int k = 0; k < 200000; ++k) {
      const int64_t i = k < 1000 ? n - 1 - k : pick(rng);
      int64_t b, d, t;
      if (ctx.cl) {
        d = i % p.dim;
        t = (i / p.dim) % s.seqlen;
        b = i / (p.dim * s.seqlen);
      } else {
        t = i % s.seqlen;
        d = (i / s.seqlen) % p.dim;
        b = i / (p.dim * s.seqlen);
      }
      const double ref = ref::ForwardAt(r, HugeX, &ctx, b, d, t);
      const double got = BF16ToFloat(yb[i]);
      if (!(std::fabs(got - ref) <= 1.6e-2 * (std::fabs(ref) + 0.5))) {
        if (++bad < 5) ADD_FAILURE() << "y[" << i << "] = " << got << ", reference " << ref;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(Conv1dHost, CanImplementRejectsBadArguments) {
  Conv1dProblem p;
  p.dim = 8;
  p.width = 4;
  Conv1dSegment s;
  int dummy = 0;
  s.set(Role::kX, &dummy);
  s.set(Role::kWeight, &dummy);
  s.set(Role::kY, &dummy);
  s.batch = 1;
  s.seqlen = 5;
  EXPECT_EQ(kernels::Conv1dCanImplement(p, &s, 1), hipSuccess);
  EXPECT_NE(kernels::Conv1dCanImplement(p, &s, 0), hipSuccess);
  Conv1dProblem q = p;
  q.width = kernels::kMaxKernelWidth + 1;
  EXPECT_NE(kernels::Conv1dCanImplement(q, &s, 1), hipSuccess);
  q = p;
  q.x_type = ScalarType::kF16;
  q.weight_type = ScalarType::kBF16;
  EXPECT_NE(kernels::Conv1dCanImplement(q, &s, 1), hipSuccess);
  q = p;
  q.has_bias = true;
  EXPECT_NE(kernels::Conv1dCanImplement(q, &s, 1), hipSuccess);
  Conv1dSegment t = s;
  t.seqlen = 0;
  EXPECT_NE(kernels::Conv1dCanImplement(p, &t, 1), hipSuccess);
  q = p;
  q.op = KernelOp::kUpdate;
  t = s;
  t.set(Role::kConvState, &dummy);
  t.set(Role::kConvStateOut, &dummy);
  t.state_len = 2;
  EXPECT_NE(kernels::Conv1dCanImplement(q, &t, 1), hipSuccess);
  t.state_len = 3;
  EXPECT_EQ(kernels::Conv1dCanImplement(q, &t, 1), hipSuccess);
  // Planning is pure host work and sizes the workspace of a backward launch.
  q = p;
  q.op = KernelOp::kBackward;
  t = s;
  t.set(Role::kDout, &dummy);
  t.set(Role::kDx, &dummy);
  t.set(Role::kDweight, &dummy);
  kernels::Conv1dPlanInfo plan;
  ASSERT_EQ(kernels::Conv1dPlan(q, &t, 1, &plan), hipSuccess);
  EXPECT_GT(plan.workspace_bytes, 0);
}

}  // namespace
}  // namespace conv1d::testing
