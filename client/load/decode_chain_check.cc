#include "client/load/decode_chain_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/verify.h"
#include "server/core/dtype.h"

namespace conv1d {
namespace {

std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsFloat(t.data.data(), t.dtype, i);
  return out;
}

}  // namespace

DecodeChainCheck::DecodeChainCheck(const WorkloadSpec& spec, const HostTensor& weight,
                                   const HostTensor& bias)
    : spec_(spec), k_(spec.width - 1), weight_(Floats(weight)), bias_(Floats(bias)) {
  Reset();
}

void DecodeChainCheck::Reset() {
  state_.assign(static_cast<size_t>(spec_.batch * spec_.dim * k_), 0.0f);
}

absl::Status DecodeChainCheck::Step(const HostTensor& x, const HostTensor* y) {
  const int64_t B = spec_.batch, D = spec_.dim, W = spec_.width, K = k_;
  const int64_t S = x.shape.size() == 3 ? (spec_.channel_last ? x.shape[1] : x.shape[2]) : 0;
  if (x.dtype != spec_.dtype || S < 1 || x.num_elements() != B * D * S) {
    return absl::InvalidArgumentError(absl::StrCat("x ", x.DebugString(),
                                                   " is not a step of this chain"));
  }
  if (y != nullptr && (y->dtype != x.dtype || y->shape != x.shape)) {
    return absl::InvalidArgumentError(absl::StrCat("step answer y is ", y->DebugString(),
                                                   " for x ", x.DebugString()));
  }
  const DType t = spec_.dtype;
  const auto at = [&](int64_t b, int64_t d, int64_t s) {
    return spec_.channel_last ? (b * S + s) * D + d : (b * D + d) * S + s;
  };
  const float* x32 = t == DType::kF32 ? reinterpret_cast<const float*>(x.data.data()) : nullptr;
  want_.resize(static_cast<size_t>(B * D * S));
  xhat_.resize(static_cast<size_t>(K + S));
  double mean_abs = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      float* row = &state_[(b * D + d) * K];
      std::copy(row, row + K, xhat_.begin());
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = at(b, d, s);
        xhat_[K + s] = x32 != nullptr ? x32[i] : LoadAsFloat(x.data.data(), t, i);
      }
      if (y != nullptr) {
        const float* w = &weight_[d * W];
        for (int64_t s = 0; s < S; ++s) {
          double z = bias_.empty() ? 0.0 : bias_[d];
          for (int64_t k = 0; k < W; ++k) z += double{w[k]} * xhat_[K + s - (W - 1) + k];
          if (spec_.silu) z = z / (1.0 + std::exp(-z));
          want_[at(b, d, s)] = z;
          mean_abs += std::fabs(z);
        }
      }
      // The state is the last K columns of x̂ (x values and earlier state:
      // already representable in the dtype, so no rounding is needed).
      std::copy(xhat_.begin() + S, xhat_.begin() + S + K, row);
    }
  }
  if (y == nullptr) return absl::OkStatus();
  mean_abs /= static_cast<double>(want_.size());
  const double tol = ToleranceFor(t);
  for (size_t i = 0; i < want_.size(); ++i) {
    const double got = x32 != nullptr ? reinterpret_cast<const float*>(y->data.data())[i]
                                      : LoadAsFloat(y->data.data(), t, static_cast<int64_t>(i));
    const double err = std::fabs(got - want_[i]);
    if (!(err <= tol * (std::fabs(want_[i]) + mean_abs) + 1e-30)) {  // also NaN
      return absl::InternalError(absl::StrCat("wrong answer: y ", y->DebugString(), " element ", i,
                                              " is ", got, ", expected ", want_[i],
                                              " (tolerance ", tol, ")"));
    }
  }
  return absl::OkStatus();
}

HostTensor DecodeChainCheck::State() const {
  return HostTensor::FromFloats(spec_.dtype, {spec_.batch, spec_.dim, k_}, state_);
}

}  // namespace conv1d
