// The CPU implementation of causal depthwise conv1d (DESIGN §1): forward,
// backward and decode update, both layouts, fp32/fp16/bf16 activations with
// any weight dtype, widths 1..kMaxWidth, optional bias, SiLU, fp32
// accumulation. It is the CPU backend's compute and the reference the GPU
// kernels are tested against.
//
// Each output is rounded once from fp32 into its dtype. dweight/dbias are
// summed per channel in a fixed order (fp32 partials over fixed chunks, added
// in double), so results do not depend on the thread count.
//
// Thread-safety: CpuConvSegment may be called concurrently for different
// segments; inputs must not change during a call and outputs must not be
// shared between concurrent calls.
#ifndef CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_H_
#define CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/util/thread_pool.h"
#include "server/core/conv_problem.h"

namespace conv1d {

// Computes one segment fully. `pool` may be null: then everything runs on the
// caller. Validates first (core ValidateSegment); on error nothing is
// written.
absl::Status CpuConvSegment(const BatchKey& key, const ConvSegment& segment,
                            ThreadPool* pool);
// The same without the check. REQUIRES: ValidateSegment(key, segment) is OK.
absl::Status CpuConvValidSegment(const BatchKey& key, const ConvSegment& segment,
                                 ThreadPool* pool);

// Host buffers for one segment, owned; for tests, tools and clients that do
// not manage their own storage. Inputs are raw bytes in the key's dtypes
// (empty = absent); outputs are sized by AllocateOutputs.
struct ConvBuffers {
  BatchKey key;
  int64_t batch = 0;
  int64_t seqlen = 0;
  int64_t state_len = 0;  // update only
  std::vector<uint8_t> x, dout, weight, bias, initial_states, dfinal_states,
      conv_state;
  std::vector<uint8_t> y, final_states, dx, dweight, dbias, dinitial_states,
      conv_state_out;

  // Sizes every output the key produces (final_states when
  // key.return_final_states, dbias when key.has_bias, dinitial_states when
  // key.return_dinitial_states) and clears the others.
  void AllocateOutputs();
  // Views of the buffers (absent where a buffer is empty).
  ConvSegment Segment();
};

// AllocateOutputs() then CpuConvSegment().
absl::Status RunCpuConv(ConvBuffers* buffers, ThreadPool* pool);

}  // namespace conv1d

#endif  // CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_H_
