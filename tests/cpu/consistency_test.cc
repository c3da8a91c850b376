// Properties tying the ops together: backward equals finite differences of
// the forward loss; chunked forward/backward with states equals one call; a
// sequence of decode updates equals a forward over the whole sequence.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv.h"
#include "tests/common/reference.h"
#include "tests/common/test_seed.h"
#include "tests/cpu/test_util.h"

namespace conv1d {
namespace {

using testing_cpu::MakeProblem;
using testing_cpu::ToDouble;
using testing_cpu::ToReference;

BatchKey Key(Op op, DType xt, int width, Layout layout, int64_t dim, bool silu) {
  return testing_cpu::KeyWithStates(op, xt, xt, width, layout, dim,
                                    silu ? Activation::kSiLU : Activation::kNone);
}

// Central difference of ref::Loss with respect to v[i].
double FiniteDiff(ref::Inputs in, std::vector<double> ref::Inputs::*member, size_t i) {
  constexpr double kStep = 1e-5;
  (in.*member)[i] += kStep;
  const double up = ref::Loss(in);
  (in.*member)[i] -= 2 * kStep;
  const double down = ref::Loss(in);
  return (up - down) / (2 * kStep);
}

void ExpectNearFd(const char* name, const std::vector<double>& got, const ref::Inputs& in,
                  std::vector<double> ref::Inputs::*member, double tol) {
  ASSERT_EQ(got.size(), (in.*member).size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    const double fd = FiniteDiff(in, member, i);
    EXPECT_NEAR(got[i], fd, tol * (1 + std::fabs(fd))) << name << "[" << i << "]";
  }
}

class FiniteDifferences : public ::testing::TestWithParam<std::tuple<int, bool, Layout>> {};

TEST_P(FiniteDifferences, BackwardMatchesLossGradient) {
  const auto [width, silu, layout] = GetParam();
  CONV1D_TEST_SEED_SCOPE(test_seed, 1000);
  for (int64_t seqlen : {2, 9}) {  // L < W-1 and L > W-1 (for W = 4)
    const BatchKey key = Key(Op::kBackward, DType::kF32, width, layout, 3, silu);
    ConvBuffers p = MakeProblem(key, 2, seqlen, 0, test_seed + seqlen + width);
    ASSERT_TRUE(RunCpuConv(&p, nullptr).ok());
    const ref::Inputs in = ToReference(p);
    // The float64 reference agrees tightly; the fp32 backend within fp32 noise.
    const ref::Outputs r = ref::Backward(in);
    ExpectNearFd("ref dx", r.dx, in, &ref::Inputs::x, 1e-7);
    ExpectNearFd("ref dweight", r.dweight, in, &ref::Inputs::weight, 1e-7);
    ExpectNearFd("ref dinitial_states", r.dinitial_states, in, &ref::Inputs::initial_states, 1e-7);
    ExpectNearFd("dx", ToDouble(p.dx, DType::kF32), in, &ref::Inputs::x, 1e-5);
    ExpectNearFd("dweight", ToDouble(p.dweight, DType::kF32), in, &ref::Inputs::weight, 1e-5);
    ExpectNearFd("dbias", ToDouble(p.dbias, DType::kF32), in, &ref::Inputs::bias, 1e-5);
    ExpectNearFd("dinitial_states", ToDouble(p.dinitial_states, DType::kF32), in,
                 &ref::Inputs::initial_states, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Small, FiniteDifferences,
                         ::testing::Combine(::testing::Values(1, 2, 4, 6), ::testing::Bool(),
                                            ::testing::Values(Layout::kChannelFirst,
                                                              Layout::kChannelLast)));

// Elements [t0, t1) along L of a [B,D,L] or [B,L,D] tensor of B*D*L elements.
std::vector<uint8_t> SliceTime(const std::vector<uint8_t>& v, const BatchKey& key, int64_t batch,
                               int64_t seqlen, int64_t t0, int64_t t1) {
  const int64_t es = DTypeSize(key.x_dtype), D = key.dim, n = t1 - t0;
  std::vector<uint8_t> out(batch * D * n * es);
  if (out.empty()) return out;
  for (int64_t b = 0; b < batch; ++b) {
    if (key.layout == Layout::kChannelLast) {
      std::memcpy(&out[b * n * D * es], &v[(b * seqlen + t0) * D * es], n * D * es);
    } else {
      for (int64_t d = 0; d < D; ++d) {
        std::memcpy(&out[(b * D + d) * n * es], &v[((b * D + d) * seqlen + t0) * es], n * es);
      }
    }
  }
  return out;
}

void PutTime(std::vector<uint8_t>* v, const std::vector<uint8_t>& part, const BatchKey& key,
             int64_t batch, int64_t seqlen, int64_t t0, int64_t t1) {
  const int64_t es = DTypeSize(key.x_dtype), D = key.dim, n = t1 - t0;
  if (n == 0) return;
  for (int64_t b = 0; b < batch; ++b) {
    if (key.layout == Layout::kChannelLast) {
      std::memcpy(&(*v)[(b * seqlen + t0) * D * es], &part[b * n * D * es], n * D * es);
    } else {
      for (int64_t d = 0; d < D; ++d) {
        std::memcpy(&(*v)[((b * D + d) * seqlen + t0) * es], &part[(b * D + d) * n * es], n * es);
      }
    }
  }
}

class Chunking : public ::testing::TestWithParam<std::tuple<DType, int, Layout>> {};

// Forward in chunks, final_states feeding the next initial_states, is
// bit-identical to one call (each output is the same fp32 expression).
TEST_P(Chunking, ForwardChunksEqualOneShot) {
  const auto [xt, width, layout] = GetParam();
  const int64_t B = 2, L = 300;
  const BatchKey key = Key(Op::kForward, xt, width, layout, 5, true);
  CONV1D_TEST_SEED_SCOPE(test_seed, 77);
  ConvBuffers whole = MakeProblem(key, B, L, 0, test_seed);
  ASSERT_TRUE(RunCpuConv(&whole, nullptr).ok());
  std::vector<uint8_t> y(whole.y.size(), 0xff);
  std::vector<uint8_t> states = whole.initial_states;
  const int64_t cuts[] = {0, 1, 2, 100, 101, 300};
  for (int c = 0; c + 1 < 6; ++c) {
    ConvBuffers part = whole;
    part.seqlen = cuts[c + 1] - cuts[c];
    part.x = SliceTime(whole.x, key, B, L, cuts[c], cuts[c + 1]);
    part.initial_states = states;
    ASSERT_TRUE(RunCpuConv(&part, nullptr).ok());
    PutTime(&y, part.y, key, B, L, cuts[c], cuts[c + 1]);
    states = part.final_states;
  }
  EXPECT_EQ(y, whole.y);
  EXPECT_EQ(states, whole.final_states);
}

// Backward in reverse chunk order, dinitial_states feeding the previous
// chunk's dfinal_states: dx matches, and the chunks' dweight/dbias sum to the
// one-shot values (up to fp32 summation order).
// fp32 only: with 16-bit outputs the chunks' rounded partial gradients differ
// from the one-shot rounding by design.
class BackwardChunking : public ::testing::TestWithParam<std::tuple<int, Layout>> {};

TEST_P(BackwardChunking, ChunksEqualOneShot) {
  const auto [width, layout] = GetParam();
  const DType xt = DType::kF32;
  const int64_t B = 2, L = 300;
  const BatchKey key = Key(Op::kBackward, xt, width, layout, 5, true);
  CONV1D_TEST_SEED_SCOPE(test_seed, 78);
  ConvBuffers whole = MakeProblem(key, B, L, 0, test_seed);
  ASSERT_TRUE(RunCpuConv(&whole, nullptr).ok());
  // x̃ states at each cut come from a forward pass.
  const int64_t cuts[] = {0, 1, 2, 100, 101, 300};
  std::vector<std::vector<uint8_t>> init(6);
  init[0] = whole.initial_states;
  for (int c = 0; c + 1 < 6; ++c) {
    ConvBuffers f = whole;
    f.key.op = Op::kForward;
    f.key.return_final_states = true;
    f.seqlen = cuts[c + 1] - cuts[c];
    f.x = SliceTime(whole.x, key, B, L, cuts[c], cuts[c + 1]);
    f.initial_states = init[c];
    ASSERT_TRUE(RunCpuConv(&f, nullptr).ok());
    init[c + 1] = f.final_states;
  }
  std::vector<uint8_t> dx(whole.dx.size(), 0xff);
  std::vector<double> dweight(key.dim * width, 0.0), dbias(key.dim, 0.0);
  std::vector<uint8_t> dstates = whole.dfinal_states;
  for (int c = 4; c >= 0; --c) {
    ConvBuffers part = whole;
    part.seqlen = cuts[c + 1] - cuts[c];
    part.x = SliceTime(whole.x, key, B, L, cuts[c], cuts[c + 1]);
    part.dout = SliceTime(whole.dout, key, B, L, cuts[c], cuts[c + 1]);
    part.initial_states = init[c];
    part.dfinal_states = dstates;
    ASSERT_TRUE(RunCpuConv(&part, nullptr).ok());
    PutTime(&dx, part.dx, key, B, L, cuts[c], cuts[c + 1]);
    const std::vector<double> dw = ToDouble(part.dweight, DType::kF32);
    const std::vector<double> db = ToDouble(part.dbias, DType::kF32);
    for (size_t i = 0; i < dw.size(); ++i) dweight[i] += dw[i];
    for (size_t i = 0; i < db.size(); ++i) dbias[i] += db[i];
    dstates = part.dinitial_states;
  }
  const std::vector<double> dx_whole = ToDouble(whole.dx, xt), dx_chunks = ToDouble(dx, xt);
  for (size_t i = 0; i < dx_whole.size(); ++i) EXPECT_NEAR(dx_chunks[i], dx_whole[i], 1e-5) << i;
  const std::vector<double> dw_whole = ToDouble(whole.dweight, DType::kF32);
  for (size_t i = 0; i < dw_whole.size(); ++i) EXPECT_NEAR(dweight[i], dw_whole[i], 1e-4) << i;
  const std::vector<double> db_whole = ToDouble(whole.dbias, DType::kF32);
  for (size_t i = 0; i < db_whole.size(); ++i) EXPECT_NEAR(dbias[i], db_whole[i], 1e-4) << i;
  const std::vector<double> ds_whole = ToDouble(whole.dinitial_states, xt);
  const std::vector<double> ds_chunks = ToDouble(dstates, xt);
  ASSERT_EQ(ds_whole.size(), ds_chunks.size());
  for (size_t i = 0; i < ds_whole.size(); ++i) EXPECT_NEAR(ds_chunks[i], ds_whole[i], 1e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(All, BackwardChunking,
                         ::testing::Combine(::testing::Values(1, 3, 4, 9),
                                            ::testing::Values(Layout::kChannelFirst,
                                                              Layout::kChannelLast)));

// Decode updates of 1, 3 and 1 tokens from a state of K >= W-1 entries equal
// a forward over the whole sequence from the state's last W-1 entries, and
// the final state is the last K inputs.
TEST_P(Chunking, UpdatesEqualForward) {
  const auto [xt, width, layout] = GetParam();
  const int64_t B = 2, L = 5, K = width - 1 + 2;
  const BatchKey fwd_key = Key(Op::kForward, xt, width, layout, 5, true);
  CONV1D_TEST_SEED_SCOPE(test_seed, 79);
  ConvBuffers fwd = MakeProblem(fwd_key, B, L, 0, test_seed);
  BatchKey upd_key = fwd_key;
  upd_key.op = Op::kUpdate;
  upd_key.has_initial_states = false;
  upd_key.return_final_states = false;
  ConvBuffers state = MakeProblem(upd_key, B, 1, K, test_seed + 1);  // random conv_state [B,D,K]
  // Forward's initial_states = the state's last W-1 columns.
  const int64_t es = DTypeSize(xt), halo = width - 1, D = fwd_key.dim;
  fwd.initial_states.assign(B * D * halo * es, 0);
  for (int64_t r = 0; halo > 0 && r < B * D; ++r) {
    std::memcpy(&fwd.initial_states[r * halo * es], &state.conv_state[(r * K + K - halo) * es],
                halo * es);
  }
  if (halo == 0) fwd.initial_states.clear();
  ASSERT_TRUE(RunCpuConv(&fwd, nullptr).ok());

  std::vector<uint8_t> conv_state = state.conv_state;
  std::vector<uint8_t> y(fwd.y.size(), 0xff);
  const int64_t cuts[] = {0, 1, 4, 5};
  for (int c = 0; c + 1 < 4; ++c) {
    ConvBuffers u = state;
    u.seqlen = cuts[c + 1] - cuts[c];
    u.x = SliceTime(fwd.x, fwd_key, B, L, cuts[c], cuts[c + 1]);
    u.weight = fwd.weight;
    u.bias = fwd.bias;
    u.conv_state = conv_state;
    ASSERT_TRUE(RunCpuConv(&u, nullptr).ok());
    PutTime(&y, u.y, fwd_key, B, L, cuts[c], cuts[c + 1]);
    conv_state = u.conv_state_out;
  }
  EXPECT_EQ(y, fwd.y);
  // Last K inputs of concat(initial state, x): 2 old state entries then x.
  std::vector<uint8_t> want(B * D * K * es);
  const std::vector<uint8_t> xs = fwd.x;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      const int64_t r = b * D + d;
      for (int64_t i = 0; i < K; ++i) {
        const int64_t j = L + i;  // index into concat(state[K], x[L])
        const uint8_t* src;
        if (j < K) {
          src = &state.conv_state[(r * K + j) * es];
        } else {
          const int64_t t = j - K;
          src = &xs[(layout == Layout::kChannelLast ? (b * L + t) * D + d : r * L + t) * es];
        }
        std::memcpy(&want[(r * K + i) * es], src, es);
      }
    }
  }
  EXPECT_EQ(conv_state, want);
}

INSTANTIATE_TEST_SUITE_P(All, Chunking,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                                            ::testing::Values(1, 3, 4, 9),
                                            ::testing::Values(Layout::kChannelFirst,
                                                              Layout::kChannelLast)));

}  // namespace
}  // namespace conv1d
