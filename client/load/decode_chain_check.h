// DecodeChainCheck: the client side of one decode chain in conv1d_load's
// session workloads. It keeps the chain's conv state and predicts, in
// float64 from the formulas of DESIGN §1 (decode update), the y of each step
// the server answers, then advances its state as the server must have. The
// state holds x values only (the last W-1 inputs), so it is exact in the
// activation dtype, as the server's state slot holds it.
//
// Written for speed rather than generality (the load generator checks every
// step of thousands of chains per second): weights are converted once, the
// buffers are reused, and a step costs a few multiply-adds per element.
//
// Thread-safety: none; one chain belongs to one thread.
#ifndef CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_
#define CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/host_tensor.h"
#include "client/workload.h"

namespace conv1d {

class DecodeChainCheck {
 public:
  // `spec`: dtype, B, D, W, activation, bias, layout (state length W-1).
  // `weight` [D, W] and `bias` [D] (or empty) in the weight dtype.
  DecodeChainCheck(const WorkloadSpec& spec, const HostTensor& weight, const HostTensor& bias);

  // Back to the zero state of a new chain.
  void Reset();

  // Checks `*y`, the server's answer to a step with input `x` ([B, D, S],
  // or [B, S, D] channel-last) against the prediction from the current
  // state, then advances the state by x (y null: only advances).
  // INTERNAL "wrong answer: ..." naming the first element off (tolerance as
  // CompareTensors in client/verify.h); INVALID_ARGUMENT when x is not a
  // step of the chain's shape or y's dtype or shape is not x's (the state
  // then stays as it was).
  absl::Status Step(const HostTensor& x, const HostTensor* y);

  // The state the chain is in, [B, D, W-1] in the activation dtype, e.g. to
  // compare with final_states the server returned.
  HostTensor State() const;

 private:
  const WorkloadSpec spec_;
  const int64_t k_;  // W - 1
  // Values of the 16- or 32-bit tensors, all exact in float (half the
  // cache footprint of double; the sums are taken in double).
  std::vector<float> weight_, bias_;
  std::vector<float> state_;  // [B, D, K]: the last K inputs of each row
  std::vector<float> xhat_;   // one row: K state columns, then S inputs
  std::vector<double> want_;   // [B, D, S] (layout of x)
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_
