// Forward pass of the CPU conv1d: y = act(bias + Σ_k w[k]·x̃[t-(W-1)+k]) and
// final_states, for both layouts. Rows are converted to fp32 in per-thread
// scratch, convolved with fixed-width unrolled loops for W <= 4 (a general
// loop otherwise), and rounded once into the output dtype.
#include <cstring>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"
#include "server/core/conv_problem.h"

namespace conv1d::cpu_internal {
namespace {

// Copies element `src_index` of x̃ (initial states, zeros, or x) of one
// channel into final_states. Same dtype on both sides: a byte copy.
void CopyFinalState(const ConvParams& p, bool channel_last, int64_t b, int64_t d) {
  const int64_t elem_bytes = DTypeSize(p.x_dtype);
  char* dst = static_cast<char*>(p.final_states);
  const int64_t state_row = b * p.dim + d;
  for (int64_t i = 0; i < p.halo; ++i) {
    const int64_t j = p.seqlen + i;  // index into x̃
    char* out = dst + (state_row * p.halo + i) * elem_bytes;
    if (j < p.halo) {
      if (p.initial_states != nullptr) {
        std::memcpy(out, static_cast<const char*>(p.initial_states) +
                             (state_row * p.halo + j) * elem_bytes, elem_bytes);
      } else {
        std::memset(out, 0, elem_bytes);
      }
      continue;
    }
    const int64_t t = j - p.halo;
    const int64_t x_index = channel_last ? (b * p.seqlen + t) * p.dim + d
                                         : state_row * p.seqlen + t;
    std::memcpy(out, static_cast<const char*>(p.x) + x_index * elem_bytes, elem_bytes);
  }
}

template <DType T>
struct ForwardCF {
  template <int kW>
  static void RunWidth(const ConvParams& p, ThreadPool* pool) {
    const int64_t chunks = (p.seqlen + kRowChunk - 1) / kRowChunk;
    const int64_t units = p.batch * p.dim * chunks;
    const int64_t min_block = std::max<int64_t>(1, 16384 / std::min(p.seqlen, kRowChunk));
    ParallelFor(pool, units, min_block, [&](int64_t begin, int64_t end) {
      float in[kRowChunk + kMaxWidth];
      float out[kRowChunk];
      for (int64_t u = begin; u < end; ++u) {
        const int64_t row = u / chunks;  // b * D + d
        const int64_t chunk = u % chunks;
        const int64_t d = row % p.dim;
        const int64_t t0 = chunk * kRowChunk;
        const int64_t n = std::min(kRowChunk, p.seqlen - t0);
        // in[0, halo) = x̃[t0, t0 + halo): the W-1 inputs before x[t0].
        for (int64_t i = 0; i < p.halo; ++i) {
          const int64_t j = t0 + i;
          if (j >= p.halo) {
            in[i] = LoadAsFloat(p.x, T, row * p.seqlen + j - p.halo);
          } else {
            in[i] = p.initial_states != nullptr
                        ? LoadAsFloat(p.initial_states, T, row * p.halo + j)
                        : 0.0f;
          }
        }
        LoadRow<T>(p.x, row * p.seqlen + t0, n, in + p.halo);
        ConvolveRow<kW>(in, p.w + d * p.width, p.width, p.bias[d], n, out);
        if (p.silu) SiluInPlace(out, n);
        StoreRow<T>(p.y, row * p.seqlen + t0, n, out);
        if (p.final_states != nullptr && chunk == chunks - 1) {
          CopyFinalState(p, /*channel_last=*/false, row / p.dim, d);
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
struct ForwardCL {
  template <int kW>
  static void RunWidth(const ConvParams& p, ThreadPool* pool) {
    const int64_t t_tiles = (p.seqlen + kTileSteps - 1) / kTileSteps;
    const int64_t d_tiles = (p.dim + kTileChannels - 1) / kTileChannels;
    const int64_t units = p.batch * t_tiles * d_tiles;
    ParallelFor(pool, units, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scratch;
      scratch.resize((kTileSteps + kMaxWidth) * kTileChannels);
      float out[kTileChannels];
      for (int64_t u = begin; u < end; ++u) {
        const int64_t di = u % d_tiles;
        const int64_t ti = (u / d_tiles) % t_tiles;
        const int64_t b = u / (d_tiles * t_tiles);
        const int64_t d0 = di * kTileChannels;
        const int64_t dc = std::min(kTileChannels, p.dim - d0);
        const int64_t t0 = ti * kTileSteps;
        const int64_t n = std::min(kTileSteps, p.seqlen - t0);
        float* in = scratch.data();
        // Row r of `in` holds x̃[t0 + r] for the tile's channels.
        for (int64_t r = 0; r < n + p.halo; ++r) {
          const int64_t j = t0 + r;
          float* dst = in + r * dc;
          if (j >= p.halo) {
            LoadRow<T>(p.x, (b * p.seqlen + j - p.halo) * p.dim + d0, dc, dst);
          } else if (p.initial_states != nullptr) {
            for (int64_t c = 0; c < dc; ++c) {
              dst[c] = LoadAsFloat(p.initial_states, T, ((b * p.dim) + d0 + c) * p.halo + j);
            }
          } else {
            std::memset(dst, 0, dc * sizeof(float));
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          ConvolveStep<kW>(in + i * dc, dc, p.w + d0, p.dim, p.width, p.bias + d0, dc, out);
          if (p.silu) SiluInPlace(out, dc);
          StoreRow<T>(p.y, (b * p.seqlen + t0 + i) * p.dim + d0, dc, out);
        }
        if (p.final_states != nullptr && ti == t_tiles - 1) {
          for (int64_t c = 0; c < dc; ++c) CopyFinalState(p, /*channel_last=*/true, b, d0 + c);
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

void ForwardChannelFirst(const ConvParams& p, ThreadPool* pool) {
  DispatchDType<ForwardCF>(p.x_dtype, p, pool);
}

void ForwardChannelLast(const ConvParams& p, ThreadPool* pool) {
  DispatchDType<ForwardCL>(p.x_dtype, p, pool);
}

}  // namespace conv1d::cpu_internal
