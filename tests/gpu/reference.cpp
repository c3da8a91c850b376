// Float64 loops straight from the definition; see reference.h.
#include "tests/gpu/reference.h"

#include <cmath>

namespace conv1d::testing {
namespace {

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// x̃[b,d,t] for t in [-(W-1), L): x, or the initial state (zeros if absent).
double XTilde(const RefShape& s, const std::vector<double>& x, const std::vector<double>& init,
              int64_t b, int64_t d, int64_t t) {
  const int64_t K = s.width - 1;
  if (t >= 0) return x[s.Idx(b, d, t)];
  return s.has_init ? init[(b * s.dim + d) * K + K + t] : 0.0;
}

double PreAct(const RefShape& s, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& bias, const std::vector<double>& init, int64_t b,
              int64_t d, int64_t t) {
  double z = s.has_bias ? bias[d] : 0.0;
  for (int64_t k = 0; k < s.width; ++k) {
    z += w[d * s.width + k] * XTilde(s, x, init, b, d, t - (s.width - 1) + k);
  }
  return z;
}

}  // namespace

void RefForward(const RefShape& s, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& bias, const std::vector<double>& init,
                std::vector<double>* y, std::vector<double>* final_states) {
  const int64_t K = s.width - 1;
  y->assign(s.batch * s.dim * s.seqlen, 0.0);
  final_states->assign(s.batch * s.dim * K, 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      for (int64_t t = 0; t < s.seqlen; ++t) {
        const double z = PreAct(s, x, w, bias, init, b, d, t);
        (*y)[s.Idx(b, d, t)] = s.silu ? z * Sigmoid(z) : z;
      }
      for (int64_t i = 0; i < K; ++i) {
        (*final_states)[(b * s.dim + d) * K + i] = XTilde(s, x, init, b, d, s.seqlen - K + i);
      }
    }
  }
}

void RefBackward(const RefShape& s, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& bias, const std::vector<double>& init,
                 const std::vector<double>& dout, const std::vector<double>& dfinal,
                 std::vector<double>* dx, std::vector<double>* dw, std::vector<double>* db,
                 std::vector<double>* dinit) {
  const int64_t K = s.width - 1, L = s.seqlen, W = s.width;
  dx->assign(s.batch * s.dim * L, 0.0);
  dw->assign(s.dim * W, 0.0);
  db->assign(s.dim, 0.0);
  dinit->assign(s.batch * s.dim * K, 0.0);
  std::vector<double> g(L), dxt(L + K);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      for (int64_t t = 0; t < L; ++t) {
        double gv = dout[s.Idx(b, d, t)];
        if (s.silu) {
          const double z = PreAct(s, x, w, bias, init, b, d, t);
          const double sg = Sigmoid(z);
          gv *= sg * (1.0 + z * (1.0 - sg));
        }
        g[t] = gv;
      }
      // x̃ index u covers the state slots (u < K) then x (u = t + K).
      for (int64_t u = 0; u < L + K; ++u) {
        double acc = 0.0;
        for (int64_t k = 0; k < W; ++k) {
          const int64_t t = u - k;
          if (t >= 0 && t < L) acc += w[d * W + k] * g[t];
        }
        if (s.has_dfinal && u >= L) acc += dfinal[(b * s.dim + d) * K + (u - L)];
        dxt[u] = acc;
      }
      for (int64_t u = 0; u < K; ++u) (*dinit)[(b * s.dim + d) * K + u] = dxt[u];
      for (int64_t t = 0; t < L; ++t) (*dx)[s.Idx(b, d, t)] = dxt[t + K];
      for (int64_t t = 0; t < L; ++t) {
        (*db)[d] += g[t];
        for (int64_t k = 0; k < W; ++k) {
          (*dw)[d * W + k] += g[t] * XTilde(s, x, init, b, d, t - K + k);
        }
      }
    }
  }
}

void RefUpdate(const RefShape& s, int64_t state_len, const std::vector<double>& x,
               const std::vector<double>& state, const std::vector<double>& w,
               const std::vector<double>& bias, std::vector<double>* y,
               std::vector<double>* new_state) {
  const int64_t K = state_len, S = s.seqlen, W = s.width;
  y->assign(s.batch * s.dim * S, 0.0);
  new_state->assign(s.batch * s.dim * K, 0.0);
  std::vector<double> c(K + S);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      for (int64_t i = 0; i < K; ++i) c[i] = state[(b * s.dim + d) * K + i];
      for (int64_t t = 0; t < S; ++t) c[K + t] = x[s.Idx(b, d, t)];
      for (int64_t t = 0; t < S; ++t) {
        double z = s.has_bias ? bias[d] : 0.0;
        for (int64_t k = 0; k < W; ++k) z += w[d * W + k] * c[K + t - (W - 1) + k];
        (*y)[s.Idx(b, d, t)] = s.silu ? z * Sigmoid(z) : z;
      }
      for (int64_t j = 0; j < K; ++j) (*new_state)[(b * s.dim + d) * K + j] = c[S + j];
    }
  }
}

double RefForwardAt(const RefShape& s, const std::vector<double>& w, const std::vector<double>& bias,
                    double (*x_at)(const void* ctx, int64_t b, int64_t d, int64_t t),
                    const void* ctx, int64_t b, int64_t d, int64_t t) {
  double z = s.has_bias ? bias[d] : 0.0;
  for (int64_t k = 0; k < s.width; ++k) {
    const int64_t tt = t - (s.width - 1) + k;
    if (tt >= 0) z += w[d * s.width + k] * x_at(ctx, b, d, tt);
  }
  return s.silu ? z / (1.0 + std::exp(-z)) : z;
}

}  // namespace conv1d::testing
