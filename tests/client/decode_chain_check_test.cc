// Unit tests of DecodeChainCheck (client/load/decode_chain_check.h), the
// load generator's float64 chain for decode sessions: its predictions over
// long chains of mixed step lengths against a plain float64 loop over the
// whole sequence, sampled checking (unchecked steps still advance the state
// exactly), how a wrong answer is named, shape errors, and its exp and SiLU
// against libm.
#include "client/load/decode_chain_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/host_tensor.h"
#include "client/workload.h"
#include "gtest/gtest.h"
#include "server/core/dtype.h"
#include "tests/common/test_seed.h"

namespace conv1d {
namespace {

WorkloadSpec Spec(DType dtype, int64_t batch, int64_t dim, int width, bool silu, bool bias,
                  bool channel_last) {
  WorkloadSpec s;
  s.op = WorkloadOp::kUpdate;
  s.dtype = dtype;
  s.weight_dtype = dtype;
  s.batch = batch;
  s.dim = dim;
  s.width = width;
  s.silu = silu;
  s.bias = bias;
  s.channel_last = channel_last;
  return s;
}

int64_t At(const WorkloadSpec& s, int64_t S, int64_t b, int64_t d, int64_t t) {
  return s.channel_last ? (b * S + t) * s.dim + d : (b * s.dim + d) * S + t;
}

// A chain of steps of 1..max_tokens tokens, and the float64 answer to every
// token from one loop over the whole sequence (zeros before its start), as
// DESIGN §1 writes the causal conv: bias + sum_k w[d][k] * x[t - (W-1) + k].
struct Chain {
  std::vector<HostTensor> xs;
  std::vector<std::vector<double>> want;  // per step, in x's layout

  Chain(const WorkloadSpec& s, const WeightSet& w, int steps, int64_t max_tokens, uint64_t seed) {
    FastRng rng(seed);
    const int64_t B = s.batch, D = s.dim, W = s.width;
    std::vector<std::vector<float>> seq(static_cast<size_t>(B * D));  // [b*D+d][t]
    std::vector<int64_t> lens;
    for (int i = 0; i < steps; ++i) {
      const int64_t S = 1 + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(max_tokens));
      const std::vector<int64_t> shape = s.channel_last ? std::vector<int64_t>{B, S, D}
                                                        : std::vector<int64_t>{B, D, S};
      xs.push_back(HostTensor::Random(s.dtype, shape, seed * 1000 + i));
      const std::vector<float> v = xs.back().ToFloats();
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t t = 0; t < S; ++t) seq[b * D + d].push_back(v[At(s, S, b, d, t)]);
        }
      }
      lens.push_back(S);
    }
    const std::vector<float> wv = w.weight.ToFloats(), bv = w.bias.ToFloats();
    int64_t t0 = 0;
    for (int i = 0; i < steps; ++i) {
      const int64_t S = lens[i];
      std::vector<double> y(static_cast<size_t>(B * D * S));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t t = 0; t < S; ++t) {
            double z = s.bias ? double{bv[d]} : 0.0;
            for (int64_t k = 0; k < W; ++k) {
              const int64_t j = t0 + t - (W - 1) + k;
              z += double{wv[d * W + k]} * (j < 0 ? 0.0 : double{seq[b * D + d][j]});
            }
            if (s.silu) z = z / (1.0 + std::exp(-z));
            y[At(s, S, b, d, t)] = z;
          }
        }
      }
      want.push_back(std::move(y));
      t0 += S;
    }
  }

  // The answer to step i rounded to the dtype, as a right server sends it.
  HostTensor Answer(const WorkloadSpec& s, int i) const {
    std::vector<float> f(want[i].begin(), want[i].end());
    return HostTensor::FromFloats(s.dtype, xs[i].shape, f);
  }
};

TEST(DecodeChainCheck, LongChainsPredictTheWholeSequenceLoop) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 11);
  int cases = 0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool cl : {false, true}) {
      for (int width : {2, 4, 5}) {
        for (bool silu : {false, true}) {
          const bool bias = (cases % 3) != 0;
          const int64_t batch = 1 + cases % 3;
          const WorkloadSpec s = Spec(dt, batch, 37, width, silu, bias, cl);
          SCOPED_TRACE(s.Describe());
          const WeightSet w = MakeWeights(s, test_seed + cases);
          const Chain chain(s, w, 80, 6, test_seed * 31 + cases);
          DecodeChainCheck check(s, w.weight, w.bias);
          for (size_t i = 0; i < chain.xs.size(); ++i) {
            const HostTensor y = chain.Answer(s, static_cast<int>(i));
            ASSERT_TRUE(check.Step(chain.xs[i], &y).ok()) << "step " << i;
            const int64_t S = chain.xs[i].shape[cl ? 1 : 2];
            for (int64_t b = 0; b < batch; ++b) {
              for (int64_t d = 0; d < s.dim; ++d) {
                for (int64_t t = 0; t < S; ++t) {
                  const double want = chain.want[i][At(s, S, b, d, t)];
                  const double got = check.Predicted(b, d, t);
                  if (silu) {
                    // The check's own exp against libm's: a few ulp.
                    ASSERT_NEAR(got, want, 2e-15 * std::fabs(want) + 1e-300)
                        << "step " << i << " b " << b << " d " << d << " t " << t;
                  } else {
                    ASSERT_EQ(got, want) << "step " << i << " b " << b << " d " << d << " t "
                                         << t;
                  }
                }
              }
            }
          }
          ++cases;
        }
      }
    }
  }
}

TEST(DecodeChainCheck, UncheckedStepsAdvanceTheStateExactly) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 12);
  for (int width : {2, 4, 6}) {
    const WorkloadSpec s = Spec(DType::kBF16, 2, 19, width, true, true, width == 4);
    SCOPED_TRACE(s.Describe());
    const WeightSet w = MakeWeights(s, test_seed);
    const Chain chain(s, w, 150, 8, test_seed + width);  // steps longer than W-1 too
    DecodeChainCheck all(s, w.weight, w.bias), sampled(s, w.weight, w.bias);
    FastRng pick(test_seed);
    int checked = 0;
    for (size_t i = 0; i < chain.xs.size(); ++i) {
      const HostTensor y = chain.Answer(s, static_cast<int>(i));
      ASSERT_TRUE(all.Step(chain.xs[i], &y).ok()) << i;
      const bool check = pick.UniformDouble() < 0.2;
      ASSERT_TRUE(sampled.Step(chain.xs[i], check ? &y : nullptr).ok()) << i;
      checked += check;
      ASSERT_EQ(sampled.State().data, all.State().data) << "after step " << i;
    }
    EXPECT_GT(checked, 10);
    EXPECT_LT(checked, 60);
    // After a long unchecked run, a checked step predicts what the fully
    // checked chain predicts, bit for bit.
    DecodeChainCheck late(s, w.weight, w.bias);
    for (size_t i = 0; i + 1 < chain.xs.size(); ++i) {
      ASSERT_TRUE(late.Step(chain.xs[i], nullptr).ok());
    }
    const HostTensor y = chain.Answer(s, static_cast<int>(chain.xs.size() - 1));
    ASSERT_TRUE(late.Step(chain.xs.back(), &y).ok());
    const int64_t S = chain.xs.back().shape[s.channel_last ? 1 : 2];
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t d = 0; d < s.dim; ++d) {
        for (int64_t t = 0; t < S; ++t) {
          ASSERT_EQ(late.Predicted(b, d, t), all.Predicted(b, d, t)) << b << " " << d << " " << t;
        }
      }
    }
    EXPECT_EQ(late.State().data, all.State().data);
  }
}

TEST(DecodeChainCheck, SampledCheckingStillFindsAWrongAnswer) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 13);
  const WorkloadSpec s = Spec(DType::kF32, 1, 64, 4, true, true, false);
  const WeightSet w = MakeWeights(s, test_seed);
  const Chain chain(s, w, 40, 3, test_seed);
  DecodeChainCheck check(s, w.weight, w.bias), all(s, w.weight, w.bias);
  for (int i = 0; i < 39; ++i) {
    const HostTensor y = chain.Answer(s, i);
    ASSERT_TRUE(all.Step(chain.xs[i], &y).ok());
    ASSERT_TRUE(check.Step(chain.xs[i], i % 9 == 0 ? &y : nullptr).ok()) << i;
  }
  HostTensor y = chain.Answer(s, 39);
  ASSERT_TRUE(all.Step(chain.xs[39], &y).ok());
  reinterpret_cast<float*>(y.data.data())[17] += 0.5f;
  const absl::Status st = check.Step(chain.xs[39], &y);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "wrong answer")) << st;
  // The state moves on all the same.
  EXPECT_EQ(check.State().data, all.State().data);
}

TEST(DecodeChainCheck, WrongAnswerIsNamedByElement) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 14);
  for (bool cl : {false, true}) {
    for (DType dt : {DType::kF32, DType::kF16}) {
      const WorkloadSpec s = Spec(dt, 2, 7, 3, true, true, cl);
      SCOPED_TRACE(s.Describe());
      const WeightSet w = MakeWeights(s, test_seed);
      const Chain chain(s, w, 2, 1, test_seed);  // steps of one token
      DecodeChainCheck check(s, w.weight, w.bias);
      const HostTensor y0 = chain.Answer(s, 0);
      ASSERT_TRUE(check.Step(chain.xs[0], &y0).ok());
      // A three-token step with two elements off: (b 1, d 4, token 2) comes
      // first in y's order in both layouts, then (b 1, d 5, token 2).
      const std::vector<int64_t> shape =
          cl ? std::vector<int64_t>{2, 3, 7} : std::vector<int64_t>{2, 7, 3};
      const HostTensor x = HostTensor::Random(dt, shape, test_seed + 5);
      // The right answer, from a copy of the check that predicts it.
      DecodeChainCheck oracle = check;
      HostTensor zeros = HostTensor::FromFloats(dt, shape, std::vector<float>(42, 0.f));
      (void)oracle.Step(x, &zeros);
      std::vector<float> f(42);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t d = 0; d < 7; ++d) {
          for (int64_t t = 0; t < 3; ++t) {
            f[At(s, 3, b, d, t)] = static_cast<float>(oracle.Predicted(b, d, t));
          }
        }
      }
      const int64_t first = At(s, 3, 1, 4, 2), second = At(s, 3, 1, 5, 2);
      f[second] += 4.f;
      f[first] -= 4.f;
      const HostTensor y = HostTensor::FromFloats(dt, shape, f);
      const absl::Status st = check.Step(x, &y);
      EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
      EXPECT_TRUE(absl::StrContains(
          st.message(), absl::StrCat(" element ", first, " (b 1, d 4, token 2) is ")))
          << st;
      EXPECT_TRUE(absl::StrContains(st.message(), "2 of 42 elements off")) << st;
    }
  }
}

TEST(DecodeChainCheck, ShapeErrorsLeaveTheStateAsItWas) {
  const WorkloadSpec s = Spec(DType::kF32, 1, 8, 4, true, true, false);
  const WeightSet w = MakeWeights(s, 1);
  DecodeChainCheck check(s, w.weight, w.bias);
  ASSERT_TRUE(check.Step(HostTensor::Random(DType::kF32, {1, 8, 2}, 1), nullptr).ok());
  const HostTensor before = check.State();
  const HostTensor x = HostTensor::Random(DType::kF32, {1, 8, 1}, 2);
  for (const HostTensor& bad : {HostTensor::Random(DType::kF32, {1, 9, 1}, 3),
                                HostTensor::Random(DType::kF32, {2, 8, 1}, 3),
                                HostTensor::Random(DType::kF32, {1, 8, 0}, 3),
                                HostTensor::Random(DType::kBF16, {1, 8, 1}, 3)}) {
    EXPECT_EQ(check.Step(bad, nullptr).code(), absl::StatusCode::kInvalidArgument)
        << bad.DebugString();
  }
  const HostTensor y_bf16 = HostTensor::Random(DType::kBF16, {1, 8, 1}, 4);
  const HostTensor y_long = HostTensor::Random(DType::kF32, {1, 8, 2}, 4);
  EXPECT_EQ(check.Step(x, &y_bf16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check.Step(x, &y_long).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check.State().data, before.data);
  check.Reset();
  EXPECT_EQ(check.State().data, std::string(before.data.size(), '\0'));
}

TEST(DecodeChainCheck, ExpAndSiluAgreeWithLibm) {
  double worst = 0;
  for (int i = -708000; i <= 708000; i += 7) {
    const double x = std::clamp(i / 1000.0 + 1e-4 * (i % 13), -708.0, 708.0);
    const double want = std::exp(x);
    worst = std::max(worst, std::fabs(ChainCheckExp(x) - want) / want);
  }
  EXPECT_LT(worst, 4 * std::numeric_limits<double>::epsilon());
  EXPECT_EQ(ChainCheckExp(0.0), 1.0);
  for (int i = -700000; i <= 700000; i += 11) {
    const double z = i / 1000.0;
    const double want = z / (1.0 + std::exp(-z));
    ASSERT_NEAR(ChainCheckSilu(z), want, 8 * std::numeric_limits<double>::epsilon() *
                                             std::fabs(want) + 1e-300) << z;
  }
  for (double z : {-701.0, -1e4, -1e30}) {
    EXPECT_LT(std::fabs(ChainCheckSilu(z)), 1e-30) << z;
  }
  EXPECT_EQ(ChainCheckSilu(1e6), 1e6);
  EXPECT_TRUE(std::isnan(ChainCheckSilu(std::numeric_limits<double>::quiet_NaN())));
}

}  // namespace
}  // namespace conv1d
