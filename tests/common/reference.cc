#include "tests/common/reference.h"

#include <cmath>

namespace conv1d::ref {
namespace {

int64_t XIndex(const Inputs& in, int64_t b, int64_t d, int64_t t) {
  return in.channel_last ? (b * in.seqlen + t) * in.dim + d
                         : (b * in.dim + d) * in.seqlen + t;
}

// x̃[b,d,j], j in [0, W-1+L): initial states (or zero) then x.
double XTilde(const Inputs& in, int64_t b, int64_t d, int64_t j) {
  const int64_t k0 = in.width - 1;
  if (j < k0) {
    return in.initial_states.empty() ? 0.0
                                     : in.initial_states[(b * in.dim + d) * k0 + j];
  }
  return in.x[XIndex(in, b, d, j - k0)];
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

double Bias(const Inputs& in, int64_t d) { return in.bias.empty() ? 0.0 : in.bias[d]; }

// Pre-activation z and its Σ|term| at (b, d, t).
void PreActivation(const Inputs& in, int64_t b, int64_t d, int64_t t, double* z,
                   double* scale) {
  double acc = Bias(in, d), mag = std::fabs(Bias(in, d));
  for (int64_t k = 0; k < in.width; ++k) {
    const double term = in.weight[d * in.width + k] * XTilde(in, b, d, t + k);
    acc += term;
    mag += std::fabs(term);
  }
  *z = acc;
  *scale = mag;
}

}  // namespace

Outputs Forward(const Inputs& in) {
  Outputs out;
  const int64_t k0 = in.width - 1;
  out.y.resize(in.batch * in.dim * in.seqlen);
  out.y_scale.resize(out.y.size());
  out.final_states.resize(in.batch * in.dim * k0);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t d = 0; d < in.dim; ++d) {
      for (int64_t t = 0; t < in.seqlen; ++t) {
        double z, scale;
        PreActivation(in, b, d, t, &z, &scale);
        const int64_t i = XIndex(in, b, d, t);
        out.y[i] = in.silu ? z * Sigmoid(z) : z;
        out.y_scale[i] = in.silu ? scale * 1.1 + 1e-30 : scale;
      }
      for (int64_t i = 0; i < k0; ++i) {
        out.final_states[(b * in.dim + d) * k0 + i] = XTilde(in, b, d, in.seqlen + i);
      }
    }
  }
  return out;
}

Outputs Backward(const Inputs& in) {
  Outputs out;
  const int64_t k0 = in.width - 1, L = in.seqlen, D = in.dim, W = in.width;
  const int64_t n = in.batch * D * L;
  std::vector<double> g(n), g_scale(n);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t t = 0; t < L; ++t) {
        const int64_t i = XIndex(in, b, d, t);
        double z, scale;
        PreActivation(in, b, d, t, &z, &scale);
        if (in.silu) {
          const double s = Sigmoid(z);
          g[i] = in.dout[i] * s * (1.0 + z * (1.0 - s));
          g_scale[i] = std::fabs(in.dout[i]) * (1.0 + scale);
        } else {
          g[i] = in.dout[i];
          g_scale[i] = std::fabs(in.dout[i]);
        }
      }
    }
  }
  out.dx.assign(n, 0.0);
  out.dx_scale.assign(n, 0.0);
  out.dinitial_states.assign(in.batch * D * k0, 0.0);
  out.dinitial_states_scale.assign(in.batch * D * k0, 0.0);
  out.dweight.assign(D * W, 0.0);
  out.dweight_scale.assign(D * W, 0.0);
  out.dbias.assign(D, 0.0);
  out.dbias_scale.assign(D, 0.0);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      // dx̃[j] = Σ_k w[k]·g[j-k] (0 <= j-k < L) + dfinal[j-L] (j >= L).
      for (int64_t j = 0; j < k0 + L; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int64_t k = 0; k < W; ++k) {
          const int64_t t = j - k;
          if (t < 0 || t >= L) continue;
          const double w = in.weight[d * W + k];
          acc += w * g[XIndex(in, b, d, t)];
          mag += std::fabs(w) * g_scale[XIndex(in, b, d, t)];
        }
        if (j >= L && !in.dfinal_states.empty()) {
          const double v = in.dfinal_states[(b * D + d) * k0 + (j - L)];
          acc += v;
          mag += std::fabs(v);
        }
        if (j < k0) {
          out.dinitial_states[(b * D + d) * k0 + j] = acc;
          out.dinitial_states_scale[(b * D + d) * k0 + j] = mag;
        } else {
          out.dx[XIndex(in, b, d, j - k0)] = acc;
          out.dx_scale[XIndex(in, b, d, j - k0)] = mag;
        }
      }
      for (int64_t t = 0; t < L; ++t) {
        const int64_t i = XIndex(in, b, d, t);
        for (int64_t k = 0; k < W; ++k) {
          const double xv = XTilde(in, b, d, t + k);
          out.dweight[d * W + k] += g[i] * xv;
          out.dweight_scale[d * W + k] += g_scale[i] * std::fabs(xv);
        }
        out.dbias[d] += g[i];
        out.dbias_scale[d] += g_scale[i];
      }
    }
  }
  return out;
}

Outputs Update(const Inputs& in) {
  Outputs out;
  const int64_t K = in.state_len, S = in.seqlen, W = in.width, D = in.dim;
  out.y.resize(in.batch * D * S);
  out.y_scale.resize(out.y.size());
  out.conv_state_out.resize(in.batch * D * K);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      // x̂ = concat(conv_state, x), length K + S.
      std::vector<double> xh(K + S);
      for (int64_t i = 0; i < K; ++i) xh[i] = in.conv_state[(b * D + d) * K + i];
      for (int64_t s = 0; s < S; ++s) xh[K + s] = in.x[XIndex(in, b, d, s)];
      for (int64_t s = 0; s < S; ++s) {
        double acc = Bias(in, d), mag = std::fabs(Bias(in, d));
        for (int64_t k = 0; k < W; ++k) {
          const double term = in.weight[d * W + k] * xh[K + s - (W - 1) + k];
          acc += term;
          mag += std::fabs(term);
        }
        const int64_t i = XIndex(in, b, d, s);
        out.y[i] = in.silu ? acc * Sigmoid(acc) : acc;
        out.y_scale[i] = in.silu ? mag * 1.1 : mag;
      }
      for (int64_t i = 0; i < K; ++i) out.conv_state_out[(b * D + d) * K + i] = xh[S + i];
    }
  }
  return out;
}

double Loss(const Inputs& in) {
  const Outputs f = Forward(in);
  double loss = 0.0;
  for (size_t i = 0; i < f.y.size(); ++i) loss += in.dout[i] * f.y[i];
  if (!in.dfinal_states.empty()) {
    for (size_t i = 0; i < f.final_states.size(); ++i) loss += in.dfinal_states[i] * f.final_states[i];
  }
  return loss;
}

double ForwardAt(const Inputs& in, XAt x_at, const void* ctx, int64_t b, int64_t d, int64_t t) {
  const int64_t k0 = in.width - 1;
  double z = Bias(in, d);
  for (int64_t k = 0; k < in.width; ++k) {
    // x̃ index t + k: the initial states (or zero) below k0, then x.
    const int64_t j = t + k;
    const double xv = j >= k0 ? x_at(ctx, b, d, j - k0)
                      : in.initial_states.empty()
                          ? 0.0
                          : in.initial_states[(b * in.dim + d) * k0 + j];
    z += in.weight[d * in.width + k] * xv;
  }
  return in.silu ? z * Sigmoid(z) : z;
}

}  // namespace conv1d::ref
