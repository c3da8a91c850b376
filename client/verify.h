// Answer checking for the command-line client and the load generator: turns
// a request (and the weights it names) into a ReferenceProblem, computes the
// expected outputs with the project's CPU implementation, and compares the
// server's response tensor by tensor with dtype-aware tolerances.
//
// When the build has no CPU backend, ReferenceAvailable() is false and
// ComputeReference answers UNIMPLEMENTED. Stateless apart from its inputs:
// thread-safe.
#ifndef CONV1D_CLIENT_VERIFY_H_
#define CONV1D_CLIENT_VERIFY_H_

#include <cmath>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/host_tensor.h"
#include "client/workload.h"
#include "conv1d/v1/conv1d.pb.h"

namespace conv1d {

struct ReferenceProblem {
  WorkloadOp op = WorkloadOp::kForward;
  bool channel_last = false;
  bool silu = false;
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0, state_len = 0;
  HostTensor x, dout, weight, bias, initial_states, dfinal_states, conv_state;
  bool return_final_states = false;
  bool return_dinitial_states = false;
  bool grad_weight_fp32 = false;
};

struct ReferenceOutputs {
  HostTensor y, final_states, dx, dweight, dbias, dinitial_states, conv_state_out;
};

bool ReferenceAvailable();
absl::StatusOr<ReferenceOutputs> ComputeReference(const ReferenceProblem& p);

// `registered` supplies the weights when the request names a registered set
// (may be null for inline-weight requests).
absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::ForwardRequest& r,
                                                    const WeightSet* registered);
absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::BackwardRequest& r,
                                                    const WeightSet* registered);
absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::UpdateRequest& r,
                                                    const WeightSet* registered);

// OK when every output matches; INTERNAL ("wrong answer: ...") on a
// mismatch; other codes when the reference cannot be computed.
absl::Status VerifyResponse(const v1::ForwardRequest& req, const v1::ForwardResponse& resp,
                            const WeightSet* registered);
absl::Status VerifyResponse(const v1::BackwardRequest& req, const v1::BackwardResponse& resp,
                            const WeightSet* registered);
absl::Status VerifyResponse(const v1::UpdateRequest& req, const v1::UpdateResponse& resp,
                            const WeightSet* registered);

// Whether `got` lies outside the comparison's tolerance of `want`:
// |got - want| > tol * (|want| + mean_abs) + 1e-30, mean_abs the mean |want|
// of the tensor (NaN is outside).
inline bool OutsideTolerance(double got, double want, double tol, double mean_abs) {
  return !(std::fabs(got - want) <= tol * (std::fabs(want) + mean_abs) + 1e-30);
}

// |got - want| <= tol * (|want| + mean|want|) elementwise, tol from the dtype
// of `got`; shapes and dtypes must be equal.
absl::Status CompareTensors(absl::string_view name, const HostTensor& got,
                            const HostTensor& want);
double ToleranceFor(DType t);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_VERIFY_H_
