#include "client/load/decode_chain_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/verify.h"
#include "server/core/dtype.h"

namespace conv1d {
namespace {

// e^x for |x| <= 708 (NaN stays NaN): Cody-Waite range reduction
// (x = n ln2 + r, |r| <= ln2/2), the Taylor polynomial of degree 13 for e^r
// (truncation below 1e-17), and 2^n through the exponent bits. Branch free,
// so the SiLU's loop vectorises.
inline double Exp(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // n * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShift = 0x1.8p52;  // t + kShift rounds t to an integer
  const double t = x * kLog2e + kShift;
  const double n = t - kShift;
  uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);  // n in the low bits, two's complement
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const uint64_t scale_bits = (bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

// z * sigmoid(z) = z / (1 + e^-z), with -z clamped to [-80, 700]: for
// z > 80, 1 + e^-z rounds to 1 either way; for z < -700 the result,
// |z| / (1 + e^700) < |z| * 1e-304, is as good as the exact (smaller) one
// against the comparison's absolute slack of 1e-30. The vectorised loop
// computes both sides of each clamp for every element, so the bound keeps
// z / (1 + e^700) out of the (slow) subnormals for all but |z| < 2e-4.
inline double Silu(double z) {
  double a = -z;
  a = a < -80.0 ? -80.0 : a;
  a = a > 700.0 ? 700.0 : a;
  return z / (1.0 + Exp(a));
}

std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsFloat(t.data.data(), t.dtype, i);
  return out;
}

// out[c] = bias[d] + sum_k w[k][d] * column_k[c] over the channels
// c = b*D + d, in float64 and in the order of k, as DESIGN §1 writes it.
// DotFixed unrolls a width known at compile time (one pass, vectorised over
// d); Dot takes it at run time (a pass per k, the same order of sums).
template <size_t... K>
inline void DotFixed(std::index_sequence<K...>, const float* const* cols, const float* wt,
                     const double* __restrict bias, int64_t B, int64_t D,
                     double* __restrict out) {
  for (int64_t b = 0; b < B; ++b) {
    const float* const c[] = {(cols[K] + b * D)...};
    const float* const w[] = {(wt + K * D)...};
    double* o = out + b * D;
    for (int64_t d = 0; d < D; ++d) {
      double z = bias[d];
      ((z += double{w[K][d]} * double{c[K][d]}), ...);
      o[d] = z;
    }
  }
}

inline void Dot(const float* const* cols, const float* wt, const double* __restrict bias,
                int64_t B, int64_t D, int64_t w, double* __restrict out) {
  for (int64_t b = 0; b < B; ++b) {
    double* o = out + b * D;
    for (int64_t d = 0; d < D; ++d) o[d] = bias[d];
    for (int64_t k = 0; k < w; ++k) {
      const float* c = cols[k] + b * D;
      const float* wk = wt + k * D;
      for (int64_t d = 0; d < D; ++d) o[d] += double{wk[d]} * double{c[d]};
    }
  }
}

// The two loops of a checked token, built for AVX2 too on x86-64 (GCC picks
// the build when the program loads): twice the lanes of the baseline's SSE2.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONV1D_CHAIN_CHECK_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CONV1D_CHAIN_CHECK_CLONES
#endif

CONV1D_CHAIN_CHECK_CLONES void DotAll(const float* const* cols, const float* wt,
                                      const double* bias, int64_t B, int64_t D, int64_t w,
                                      double* out) {
  switch (w) {
    case 2: DotFixed(std::make_index_sequence<2>(), cols, wt, bias, B, D, out); break;
    case 3: DotFixed(std::make_index_sequence<3>(), cols, wt, bias, B, D, out); break;
    case 4: DotFixed(std::make_index_sequence<4>(), cols, wt, bias, B, D, out); break;
    default: Dot(cols, wt, bias, B, D, w, out); break;
  }
}

CONV1D_CHAIN_CHECK_CLONES void SiluAll(double* z, int64_t n) {
  for (int64_t i = 0; i < n; ++i) z[i] = Silu(z[i]);
}

// Elements outside the tolerance, as CompareTensors counts them (NaN counts).
CONV1D_CHAIN_CHECK_CLONES int64_t CountOff(const float* got, const double* want, int64_t n,
                                           double tol, double mean_abs) {
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) off += OutsideTolerance(got[i], want[i], tol, mean_abs);
  return off;
}

// Flat index of (b, d, token s) in a step tensor of S tokens.
int64_t At(bool channel_last, int64_t D, int64_t S, int64_t b, int64_t d, int64_t s) {
  return channel_last ? (b * S + s) * D + d : (b * D + d) * S + s;
}

}  // namespace

double ChainCheckExp(double x) { return Exp(x < -708.0 ? -708.0 : x > 708.0 ? 708.0 : x); }
double ChainCheckSilu(double z) { return Silu(z); }

DecodeChainCheck::DecodeChainCheck(const WorkloadSpec& spec, const HostTensor& weight,
                                   const HostTensor& bias)
    : spec_(spec), w_(spec.width), bd_(spec.batch * spec.dim) {
  const int64_t D = spec.dim;
  const std::vector<float> w = Floats(weight);  // [D, W]
  weight_t_.resize(static_cast<size_t>(w_ * D));
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t k = 0; k < w_; ++k) weight_t_[k * D + d] = w[d * w_ + k];
  }
  bias_.assign(static_cast<size_t>(D), 0.0);
  if (!bias.empty()) {
    const std::vector<float> b = Floats(bias);
    std::copy(b.begin(), b.end(), bias_.begin());
  }
  Reset();
}

void DecodeChainCheck::Reset() {
  cols_.assign(static_cast<size_t>(w_), nullptr);
  ring_.assign(static_cast<size_t>(w_ * bd_), 0.0f);
  head_ = 0;
}

absl::Status DecodeChainCheck::CheckShapes(const client::TensorView& x,
                                           const client::TensorView* y) const {
  const auto shape = x.shape();
  const int64_t d_axis = spec_.channel_last ? 2 : 1, s_axis = spec_.channel_last ? 1 : 2;
  if (x.dtype() != spec_.dtype || shape.size() != 3 || shape[0] != spec_.batch ||
      shape[d_axis] != spec_.dim || shape[s_axis] < 1) {
    return absl::InvalidArgumentError(absl::StrCat("x ", x.DebugString(),
                                                   " is not a step of this chain"));
  }
  if (y != nullptr && (y->dtype() != x.dtype() || y->shape() != shape)) {
    return absl::InvalidArgumentError(absl::StrCat("step answer y is ", y->DebugString(),
                                                   " for x ", x.DebugString()));
  }
  return absl::OkStatus();
}

void DecodeChainCheck::Put(const client::TensorView& x, int64_t s, float* column) const {
  const int64_t B = spec_.batch, D = spec_.dim;
  const int64_t S = x.shape()[spec_.channel_last ? 1 : 2];
  const uint8_t* base = x.bytes().data();
  const DType t = spec_.dtype;
  if (t == DType::kF32 && (S == 1 || spec_.channel_last)) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(column + b * D, base + At(spec_.channel_last, D, S, b, 0, s) * sizeof(float),
                  static_cast<size_t>(D) * sizeof(float));
    }
    return;
  }
  const int64_t stride = spec_.channel_last ? 1 : S;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i0 = At(spec_.channel_last, D, S, b, 0, s);
    float* c = column + b * D;
    switch (t) {
      case DType::kF32: {
        const float* p = reinterpret_cast<const float*>(base) + i0;
        for (int64_t d = 0; d < D; ++d) c[d] = p[d * stride];
        break;
      }
      case DType::kF16: {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(base) + i0;
        for (int64_t d = 0; d < D; ++d) c[d] = HalfToFloat(p[d * stride]);
        break;
      }
      case DType::kBF16: {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(base) + i0;
        for (int64_t d = 0; d < D; ++d) c[d] = BF16ToFloat(p[d * stride]);
        break;
      }
    }
  }
}

void DecodeChainCheck::Predict(int64_t s) {
  const float** c = cols_.data();
  for (int64_t k = 0; k < w_; ++k) c[k] = &ring_[((head_ + k) % w_) * bd_];
  double* z = &want_[s * bd_];
  const int64_t B = spec_.batch, D = spec_.dim;
  DotAll(c, weight_t_.data(), bias_.data(), B, D, w_, z);
  if (spec_.silu) {
    SiluAll(z, bd_);
  }
  // Four partial sums, so the loop vectorises (the order only moves the
  // tolerance by rounding).
  double sum[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= bd_; i += 4) {
    for (int j = 0; j < 4; ++j) sum[j] += std::fabs(z[i + j]);
  }
  for (; i < bd_; ++i) sum[0] += std::fabs(z[i]);
  mean_abs_ += (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

absl::Status DecodeChainCheck::Step(const HostTensor& x, const HostTensor* y) {
  if (y == nullptr) return Step(x.view(), nullptr);
  const client::TensorView yv = y->view();
  return Step(x.view(), &yv);
}

absl::Status DecodeChainCheck::Step(const client::TensorView& x, const client::TensorView* y) {
  if (absl::Status st = CheckShapes(x, y); !st.ok()) return st;
  const int64_t K = w_ - 1;
  const int64_t S = x.shape()[spec_.channel_last ? 1 : 2];
  // Unchecked, tokens before the last K leave no trace in the state.
  int64_t s = 0;
  if (y == nullptr && S > K) {
    s = S - K;
    head_ = (head_ + s) % w_;
  }
  if (y != nullptr) {
    want_.resize(static_cast<size_t>(S * bd_));
    mean_abs_ = 0;
  }
  for (; s < S; ++s) {
    Put(x, s, &ring_[((head_ + K) % w_) * bd_]);
    if (y != nullptr) Predict(s);
    head_ = (head_ + 1) % w_;
  }
  if (y == nullptr) return absl::OkStatus();
  mean_abs_ /= static_cast<double>(S * bd_);
  return Compare(*y, S);
}

absl::Status DecodeChainCheck::Compare(const client::TensorView& y, int64_t S) const {
  const int64_t B = spec_.batch, D = spec_.dim;
  const bool cl = spec_.channel_last;
  const DType t = spec_.dtype;
  const double tol = ToleranceFor(t);
  const uint8_t* base = y.bytes().data();
  const double mean_abs = mean_abs_;
  int64_t bad = 0;
  if (t == DType::kF32 && (S == 1 || cl)) {
    // y's rows of D channels are contiguous: compare them as they lie.
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t b = 0; b < B; ++b) {
        bad += CountOff(reinterpret_cast<const float*>(base) + At(cl, D, S, b, 0, s),
                        &want_[s * bd_ + b * D], D, tol, mean_abs);
      }
    }
    if (bad == 0) return absl::OkStatus();
  }
  // The first element off in y's order (and the count), element by element.
  int64_t first = -1, b0 = 0, d0 = 0, s0 = 0;
  bad = 0;
  for (int64_t i = 0, n = S * bd_; i < n; ++i) {
    const int64_t s = cl ? (i / D) % S : i % S;
    const int64_t bd = cl ? (i / (S * D)) * D + i % D : i / S;
    if (OutsideTolerance(LoadAsFloat(base, t, i), want_[s * bd_ + bd], tol, mean_abs)) {
      if (first < 0) first = i, b0 = bd / D, d0 = bd % D, s0 = s;
      ++bad;
    }
  }
  if (first < 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "wrong answer: y ", y.DebugString(), " element ", first, " (b ", b0, ", d ", d0,
      ", token ", s0, ") is ", LoadAsFloat(base, t, first), ", expected ",
      want_[s0 * bd_ + b0 * D + d0], " (tolerance ", tol, "; ", bad, " of ", S * bd_,
      " elements off)"));
}

HostTensor DecodeChainCheck::State() const {
  const int64_t K = w_ - 1;
  std::vector<float> state(static_cast<size_t>(bd_ * K));  // [B, D, K]
  for (int64_t k = 0; k < K; ++k) {
    const float* col = &ring_[((head_ + k) % w_) * bd_];
    for (int64_t c = 0; c < bd_; ++c) state[c * K + k] = col[c];
  }
  return HostTensor::FromFloats(spec_.dtype, {spec_.batch, spec_.dim, K}, state);
}

}  // namespace conv1d
