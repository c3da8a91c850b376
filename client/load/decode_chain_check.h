// DecodeChainCheck: the client side of one decode chain in conv1d_load's
// session workloads. It keeps the chain's conv state and predicts, in
// float64 from the formulas of DESIGN §1 (decode update), the y of each step
// the server answers, then advances its state as the server must have. The
// state holds x values only (the last W-1 inputs), so it is exact in the
// activation dtype, as the server's state slot holds it.
//
// Written for speed (the load generator runs thousands of chains at once):
// the state is a ring of W columns of B*D inputs, so a token's inputs are
// written once into the free column and no row is shifted; a checked token
// is a few contiguous loops over the channels (float64 multiply-adds in the
// order of the formula, then the float64 SiLU); weights are converted once
// and the buffers are reused. A step that is not checked only writes its
// inputs into the ring, so a chain can be advanced exactly at every step
// and checked at a sample of them.
//
// The SiLU's exp is the check's own float64 exp (range reduction and a
// degree-13 polynomial, within a few ulp of std::exp; the unit tests compare
// the two), branch free so that the loop over channels vectorises: libm's
// scalar exp was the largest cost of a checked step.
//
// Thread-safety: none; one chain belongs to one thread.
#ifndef CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_
#define CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/host_tensor.h"
#include "client/tensor_view.h"
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
  // state, then advances the state by x (y null: only advances, at the cost
  // of copying x's last W-1 tokens into the state).
  // INTERNAL "wrong answer: ..." naming the first element off by its index
  // in y and its batch row, channel and token (tolerance as CompareTensors
  // in client/verify.h; the state is advanced all the same);
  // INVALID_ARGUMENT when x is not a step of the chain's shape or y's dtype
  // or shape is not x's (the state then stays as it was).
  absl::Status Step(const client::TensorView& x, const client::TensorView* y);
  absl::Status Step(const HostTensor& x, const HostTensor* y);

  // The state the chain is in, [B, D, W-1] in the activation dtype, e.g. to
  // compare with final_states the server returned.
  HostTensor State() const;

  // The float64 prediction of the last checked step for batch row b,
  // channel d and token s (REQUIRES: in range of that step).
  double Predicted(int64_t b, int64_t d, int64_t s) const {
    return want_[static_cast<size_t>(s * bd_ + b * spec_.dim + d)];
  }

 private:
  absl::Status CheckShapes(const client::TensorView& x, const client::TensorView* y) const;
  // Writes token s of x into the ring's free column.
  void Put(const client::TensorView& x, int64_t s, float* column) const;
  // want_[s] from the ring (the state, then token s in the free column).
  void Predict(int64_t s);
  absl::Status Compare(const client::TensorView& y, int64_t S) const;

  const WorkloadSpec spec_;
  const int64_t w_;   // W; the state holds W-1 inputs
  const int64_t bd_;  // B*D, the length of a column
  // Weights [W][D] (column k of every channel together) and bias [D] (zeros
  // without one): values of 16- or 32-bit tensors, exact in float/double.
  std::vector<float> weight_t_;
  std::vector<double> bias_;
  // [W][B*D]: columns head_ .. head_+W-2 (mod W) are the state, oldest
  // first; the remaining column is free for the next token.
  std::vector<float> ring_;
  int64_t head_ = 0;
  std::vector<const float*> cols_;  // [W]: the ring's columns for one token
  std::vector<double> want_;        // [S][B*D]: the prediction of a checked step
  double mean_abs_ = 0;       // of want_
};

// The check's float64 exp (see the header comment; x clamped to ±708) and
// SiLU, exposed for the tests.
double ChainCheckExp(double x);
double ChainCheckSilu(double z);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_DECODE_CHAIN_CHECK_H_
