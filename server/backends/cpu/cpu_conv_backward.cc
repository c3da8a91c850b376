// Backward pass of the CPU conv1d: dx, dweight, dbias, dinitial_states (with
// dfinal_states flowing back into the last W-1 inputs of x̃), both layouts.
//
// Work is split over channels only, and each channel's dweight/dbias sum runs
// in one fixed order: fp32 partials over a fixed chunk of time steps, added
// into a double per (b, chunk). Results are therefore bit-identical whatever
// the thread count. The gradient g is recomputed over a W-1 halo at chunk
// edges rather than shared between chunks.
#include <cstring>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"

namespace conv1d::cpu_internal {
namespace {

// Σ_i a[i]·b[i] with eight fixed fp32 lanes (vectorises; fixed order).
inline float Dot(const float* a, const float* b, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) lanes[0] += a[i] * b[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

inline float Sum(const float* a, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l];
  }
  for (; i < n; ++i) lanes[0] += a[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// x̃[j] of one channel for j < W-1 + L, from initial states (or zeros) or x.
template <DType T>
inline float LoadXTilde(const ConvParams& p, int64_t state_index_base, int64_t j,
                        int64_t x_index_of_t0, int64_t x_step) {
  if (j < p.halo) {
    return p.initial_states != nullptr
               ? LoadAsFloat(p.initial_states, T, state_index_base + j)
               : 0.0f;
  }
  return LoadAsFloat(p.x, T, x_index_of_t0 + (j - p.halo) * x_step);
}

template <DType T>
struct BackwardCF {
  template <int kW>
  static void RunWidth(const ConvParams& p, ThreadPool* pool) {
    const int64_t halo = p.halo;
    const int64_t width = p.width;
    ParallelFor(pool, p.dim, 1, [&](int64_t begin, int64_t end) {
      float xs[kRowChunk + 2 * kMaxWidth];  // x̃[t0, t0 + gn + halo)
      float ds[kRowChunk + kMaxWidth];      // dout, then g, at t0 + i
      float zs[kRowChunk + kMaxWidth];
      float dxs[kRowChunk];
      float w_rev[kMaxWidth];
      double dw_acc[kMaxWidth];
      for (int64_t d = begin; d < end; ++d) {
        const float* w = p.w + d * width;
        for (int64_t k = 0; k < width; ++k) w_rev[k] = w[halo - k];
        for (int64_t k = 0; k < width; ++k) dw_acc[k] = 0.0;
        double db_acc = 0.0;
        for (int64_t b = 0; b < p.batch; ++b) {
          const int64_t row = b * p.dim + d;
          for (int64_t t0 = 0; t0 < p.seqlen; t0 += kRowChunk) {
            const int64_t n = std::min(kRowChunk, p.seqlen - t0);
            const int64_t gn = std::min(n + halo, p.seqlen - t0);  // valid g
            for (int64_t i = 0; i < halo; ++i) {
              xs[i] = LoadXTilde<T>(p, row * halo, t0 + i, row * p.seqlen, 1);
            }
            LoadRow<T>(p.x, row * p.seqlen + t0, gn, xs + halo);
            LoadRow<T>(p.dout, row * p.seqlen + t0, gn, ds);
            if (p.silu) {
              ConvolveRow<kW>(xs, w, width, p.bias[d], gn, zs);
              for (int64_t i = 0; i < gn; ++i) ds[i] = SiluGrad(zs[i], ds[i]);
            }
            for (int64_t i = gn; i < n + halo; ++i) ds[i] = 0.0f;
            // dx[t] = Σ_k w[k]·g[t + halo - k]: a forward conv of g with w reversed.
            ConvolveRow<kW>(ds, w_rev, width, 0.0f, n, dxs);
            if (p.dfinal_states != nullptr) {
              for (int64_t i = std::max<int64_t>(0, p.seqlen - halo - t0); i < n; ++i) {
                dxs[i] += LoadAsFloat(p.dfinal_states, T, row * halo + t0 + i + halo - p.seqlen);
              }
            }
            StoreRow<T>(p.dx, row * p.seqlen + t0, n, dxs);
            for (int64_t k = 0; k < width; ++k) dw_acc[k] += Dot(ds, xs + k, n);
            db_acc += Sum(ds, n);
            if (t0 == 0 && p.dinitial_states != nullptr) {
              for (int64_t j = 0; j < halo; ++j) {
                float v = 0.0f;
                for (int64_t k = 0; k <= j; ++k) v += w[k] * ds[j - k];
                if (j >= p.seqlen && p.dfinal_states != nullptr) {
                  v += LoadAsFloat(p.dfinal_states, T, row * halo + j - p.seqlen);
                }
                StoreFromFloat(p.dinitial_states, T, row * halo + j, v);
              }
            }
          }
        }
        for (int64_t k = 0; k < width; ++k) {
          StoreFromFloat(p.dweight, p.grad_weight_dtype, d * width + k,
                         static_cast<float>(dw_acc[k]));
        }
        if (p.dbias != nullptr) {
          StoreFromFloat(p.dbias, p.grad_weight_dtype, d, static_cast<float>(db_acc));
        }
      }
    });
  }

  static void Run(const ConvParams& p, ThreadPool* pool) {
    switch (p.width) {
      case 1: RunWidth<1>(p, pool); break;
      case 2: RunWidth<2>(p, pool); break;
      case 3: RunWidth<3>(p, pool); break;
      case 4: RunWidth<4>(p, pool); break;
      default: RunWidth<0>(p, pool); break;
    }
  }
};

template <DType T>
struct BackwardCL {
  template <int kW>
  static void RunWidth(const ConvParams& p, ThreadPool* pool) {
    const int64_t halo = p.halo;
    const int64_t width = p.width;
    const int64_t dim = p.dim;
    const int64_t d_tiles = (dim + kTileChannels - 1) / kTileChannels;
    ParallelFor(pool, d_tiles, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scratch;
      thread_local std::vector<double> acc;
      const int64_t rows = kTileSteps + 2 * kMaxWidth;
      scratch.resize(3 * rows * kTileChannels + (kMaxWidth + 1) * kTileChannels);
      acc.resize((kMaxWidth + 1) * kTileChannels);
      float* xs = scratch.data();             // x̃ rows
      float* gs = xs + rows * kTileChannels;  // dout, then g, rows
      float* zs = gs + rows * kTileChannels;  // z row, dx row
      float* part = zs + rows * kTileChannels;  // fp32 partials [W+1][dc]
      const float zeros[kTileChannels] = {};
      for (int64_t di = begin; di < end; ++di) {
        const int64_t d0 = di * kTileChannels;
        const int64_t dc = std::min(kTileChannels, dim - d0);
        std::fill(acc.begin(), acc.begin() + (width + 1) * dc, 0.0);
        for (int64_t b = 0; b < p.batch; ++b) {
          for (int64_t t0 = 0; t0 < p.seqlen; t0 += kTileSteps) {
            const int64_t n = std::min(kTileSteps, p.seqlen - t0);
            const int64_t gn = std::min(n + halo, p.seqlen - t0);
            for (int64_t r = 0; r < gn + halo; ++r) {
              const int64_t j = t0 + r;
              float* dst = xs + r * dc;
              if (j >= halo) {
                LoadRow<T>(p.x, (b * p.seqlen + j - halo) * dim + d0, dc, dst);
              } else {
                for (int64_t c = 0; c < dc; ++c) {
                  dst[c] = LoadXTilde<T>(p, (b * dim + d0 + c) * halo, j, 0, 0);
                }
              }
            }
            for (int64_t r = 0; r < gn; ++r) {
              float* g = gs + r * dc;
              LoadRow<T>(p.dout, (b * p.seqlen + t0 + r) * dim + d0, dc, g);
              if (p.silu) {
                ConvolveStep<kW>(xs + r * dc, dc, p.w + d0, dim, width, p.bias + d0, dc, zs);
                for (int64_t c = 0; c < dc; ++c) g[c] = SiluGrad(zs[c], g[c]);
              }
            }
            std::memset(gs + gn * dc, 0, (n + halo - gn) * dc * sizeof(float));
            for (int64_t i = 0; i < n; ++i) {
              const int64_t t = t0 + i;
              // Row m of the reversed weights is w[halo - m].
              ConvolveStep<kW>(gs + i * dc, dc, p.w + halo * dim + d0, -dim, width, zeros, dc, zs);
              if (p.dfinal_states != nullptr && t + halo >= p.seqlen) {
                for (int64_t c = 0; c < dc; ++c) {
                  zs[c] += LoadAsFloat(p.dfinal_states, T, (b * dim + d0 + c) * halo + t + halo - p.seqlen);
                }
              }
              StoreRow<T>(p.dx, (b * p.seqlen + t) * dim + d0, dc, zs);
            }
            std::memset(part, 0, (width + 1) * dc * sizeof(float));
            for (int64_t i = 0; i < n; ++i) {
              const float* g = gs + i * dc;
              for (int64_t k = 0; k < width; ++k) {
                const float* xk = xs + (i + k) * dc;
                float* pk = part + k * dc;
                for (int64_t c = 0; c < dc; ++c) pk[c] += g[c] * xk[c];
              }
              float* pb = part + width * dc;
              for (int64_t c = 0; c < dc; ++c) pb[c] += g[c];
            }
            for (int64_t e = 0; e < (width + 1) * dc; ++e) acc[e] += part[e];
            if (t0 == 0 && p.dinitial_states != nullptr) {
              for (int64_t c = 0; c < dc; ++c) {
                const int64_t state_base = (b * dim + d0 + c) * halo;
                for (int64_t j = 0; j < halo; ++j) {
                  float v = 0.0f;
                  for (int64_t k = 0; k <= j; ++k) v += p.w[k * dim + d0 + c] * gs[(j - k) * dc + c];
                  if (j >= p.seqlen && p.dfinal_states != nullptr) {
                    v += LoadAsFloat(p.dfinal_states, T, state_base + j - p.seqlen);
                  }
                  StoreFromFloat(p.dinitial_states, T, state_base + j, v);
                }
              }
            }
          }
        }
        for (int64_t c = 0; c < dc; ++c) {
          for (int64_t k = 0; k < width; ++k) {
            StoreFromFloat(p.dweight, p.grad_weight_dtype, (d0 + c) * width + k,
                           static_cast<float>(acc[k * dc + c]));
          }
          if (p.dbias != nullptr) {
            StoreFromFloat(p.dbias, p.grad_weight_dtype, d0 + c,
                           static_cast<float>(acc[width * dc + c]));
          }
        }
      }
    });
  }

  static void Run(const ConvParams& p, ThreadPool* pool) {
    switch (p.width) {
      case 1: RunWidth<1>(p, pool); break;
      case 2: RunWidth<2>(p, pool); break;
      case 3: RunWidth<3>(p, pool); break;
      case 4: RunWidth<4>(p, pool); break;
      default: RunWidth<0>(p, pool); break;
    }
  }
};

}  // namespace

void BackwardChannelFirst(const ConvParams& p, ThreadPool* pool) {
  DispatchDType<BackwardCF>(p.x_dtype, p, pool);
}

void BackwardChannelLast(const ConvParams& p, ThreadPool* pool) {
  DispatchDType<BackwardCL>(p.x_dtype, p, pool);
}

}  // namespace conv1d::cpu_internal
