#include "client/verify.h"

#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conv1d {

double ToleranceFor(DType t) {
  switch (t) {
    case DType::kF32: return 1e-3;
    case DType::kF16: return 4e-3;
    case DType::kBF16: return 2.5e-2;
  }
  return 0;
}

absl::Status CompareTensors(absl::string_view name, const HostTensor& got,
                            const HostTensor& want) {
  if (got.dtype != want.dtype || got.shape != want.shape) {
    return absl::InternalError(absl::StrCat("wrong answer: ", name, " is ", got.DebugString(),
                                            ", expected ", want.DebugString()));
  }
  const std::vector<double> g = got.ToDoubles(), w = want.ToDoubles();
  if (g.size() != w.size()) {
    return absl::InternalError(absl::StrCat("wrong answer: ", name, " has ", g.size(),
                                            " elements, expected ", w.size()));
  }
  double mean_abs = 0;
  for (double v : w) mean_abs += std::fabs(v);
  mean_abs /= std::max<size_t>(1, w.size());
  const double tol = ToleranceFor(got.dtype);
  int64_t bad = 0, first_bad = -1;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    if (OutsideTolerance(g[i], w[i], tol, mean_abs)) {
      if (first_bad < 0) first_bad = static_cast<int64_t>(i);
      ++bad;
    }
    if (err / (std::fabs(w[i]) + mean_abs + 1e-30) > worst) {
      worst = err / (std::fabs(w[i]) + mean_abs + 1e-30);
    }
  }
  if (bad == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "wrong answer: ", name, " ", got.DebugString(), ": ", bad, " of ", g.size(),
      " elements off (first at ", first_bad, ": got ", g[first_bad], ", expected ",
      w[first_bad], "; worst relative error ", worst, ", tolerance ", tol, ")"));
}

namespace {

absl::Status Load(const v1::Tensor& t, absl::string_view name, HostTensor* out) {
  absl::StatusOr<HostTensor> h = HostTensor::FromProto(t);
  if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", h.status().message()));
  *out = *std::move(h);
  return absl::OkStatus();
}

template <typename Req>
absl::Status Common(const Req& r, const WeightSet* registered, ReferenceProblem* p) {
  absl::Status s = Load(r.x(), "x", &p->x);
  if (!s.ok()) return s;
  if (p->x.shape.size() != 3) return absl::InvalidArgumentError("x must be 3-d");
  p->channel_last = r.layout() == v1::LAYOUT_CHANNEL_LAST;
  p->silu = r.activation() == v1::ACTIVATION_SILU;
  p->batch = p->x.shape[0];
  p->dim = p->channel_last ? p->x.shape[2] : p->x.shape[1];
  p->seqlen = p->channel_last ? p->x.shape[1] : p->x.shape[2];
  if (r.has_inline_weights()) {
    if (s = Load(r.inline_weights().weight(), "weight", &p->weight); !s.ok()) return s;
    if (r.inline_weights().has_bias()) {
      if (s = Load(r.inline_weights().bias(), "bias", &p->bias); !s.ok()) return s;
    }
  } else {
    if (registered == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "request names registered weights '", r.weights_name(),
          "'; verifying needs their values locally"));
    }
    p->weight = registered->weight;
    p->bias = registered->bias;
  }
  if (p->weight.shape.size() != 2) return absl::InvalidArgumentError("weight must be [D, W]");
  p->width = p->weight.shape[1];
  return absl::OkStatus();
}

absl::Status Check(absl::string_view name, const v1::Tensor& got, const HostTensor& want) {
  if (want.data.empty() && got.data().empty()) return absl::OkStatus();
  HostTensor g;
  if (absl::Status s = Load(got, name, &g); !s.ok()) {
    return absl::InternalError(absl::StrCat("wrong answer: ", s.message()));
  }
  return CompareTensors(name, g, want);
}

}  // namespace

absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::ForwardRequest& r,
                                                    const WeightSet* registered) {
  ReferenceProblem p;
  p.op = WorkloadOp::kForward;
  if (absl::Status s = Common(r, registered, &p); !s.ok()) return s;
  if (r.has_initial_states()) {
    if (absl::Status s = Load(r.initial_states(), "initial_states", &p.initial_states); !s.ok()) return s;
  }
  p.return_final_states = r.return_final_states();
  return p;
}

absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::BackwardRequest& r,
                                                    const WeightSet* registered) {
  ReferenceProblem p;
  p.op = WorkloadOp::kBackward;
  if (absl::Status s = Common(r, registered, &p); !s.ok()) return s;
  if (absl::Status s = Load(r.dout(), "dout", &p.dout); !s.ok()) return s;
  if (r.has_initial_states()) {
    if (absl::Status s = Load(r.initial_states(), "initial_states", &p.initial_states); !s.ok()) return s;
  }
  if (r.has_dfinal_states()) {
    if (absl::Status s = Load(r.dfinal_states(), "dfinal_states", &p.dfinal_states); !s.ok()) return s;
  }
  p.return_dinitial_states = r.return_dinitial_states();
  p.grad_weight_fp32 = r.grad_weight_fp32();
  return p;
}

absl::StatusOr<ReferenceProblem> ProblemFromRequest(const v1::UpdateRequest& r,
                                                    const WeightSet* registered) {
  ReferenceProblem p;
  p.op = WorkloadOp::kUpdate;
  if (absl::Status s = Common(r, registered, &p); !s.ok()) return s;
  if (absl::Status s = Load(r.conv_state(), "conv_state", &p.conv_state); !s.ok()) return s;
  if (p.conv_state.shape.size() != 3) return absl::InvalidArgumentError("conv_state must be 3-d");
  p.state_len = p.conv_state.shape[2];
  return p;
}

namespace {

// The float64 reference outputs of a request.
template <typename Request>
absl::StatusOr<ReferenceOutputs> ReferenceOf(const Request& req, const WeightSet* registered) {
  absl::StatusOr<ReferenceProblem> p = ProblemFromRequest(req, registered);
  if (!p.ok()) return p.status();
  return ComputeReference(*p);
}

struct Expected {
  absl::string_view name;
  const v1::Tensor& got;
  const HostTensor& want;
};

// Checks each output in turn; the first mismatch names its field.
absl::Status CheckAll(std::initializer_list<Expected> outputs) {
  for (const Expected& e : outputs) {
    if (absl::Status s = Check(e.name, e.got, e.want); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyResponse(const v1::ForwardRequest& req, const v1::ForwardResponse& resp,
                            const WeightSet* registered) {
  absl::StatusOr<ReferenceOutputs> ref = ReferenceOf(req, registered);
  if (!ref.ok()) return ref.status();
  return CheckAll({{"y", resp.y(), ref->y},
                   {"final_states", resp.final_states(), ref->final_states}});
}

absl::Status VerifyResponse(const v1::BackwardRequest& req, const v1::BackwardResponse& resp,
                            const WeightSet* registered) {
  absl::StatusOr<ReferenceOutputs> ref = ReferenceOf(req, registered);
  if (!ref.ok()) return ref.status();
  return CheckAll({{"dx", resp.dx(), ref->dx},
                   {"dweight", resp.dweight(), ref->dweight},
                   {"dbias", resp.dbias(), ref->dbias},
                   {"dinitial_states", resp.dinitial_states(), ref->dinitial_states}});
}

absl::Status VerifyResponse(const v1::UpdateRequest& req, const v1::UpdateResponse& resp,
                            const WeightSet* registered) {
  absl::StatusOr<ReferenceOutputs> ref = ReferenceOf(req, registered);
  if (!ref.ok()) return ref.status();
  return CheckAll({{"y", resp.y(), ref->y},
                   {"conv_state", resp.conv_state(), ref->conv_state_out}});
}

}  // namespace conv1d
