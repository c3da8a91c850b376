#include "server/core/conv_problem.h"

#include "absl/strings/str_cat.h"

namespace conv1d {

const char* OpName(Op op) {
  switch (op) {
    case Op::kForward: return "forward";
    case Op::kBackward: return "backward";
    case Op::kUpdate: return "update";
  }
  return "?";
}

bool operator==(const BatchKey& a, const BatchKey& b) {
  return a.op == b.op && a.x_dtype == b.x_dtype &&
         a.weight_dtype == b.weight_dtype &&
         a.grad_weight_dtype == b.grad_weight_dtype && a.dim == b.dim &&
         a.width == b.width && a.activation == b.activation &&
         a.layout == b.layout && a.has_bias == b.has_bias &&
         a.has_initial_states == b.has_initial_states &&
         a.return_final_states == b.return_final_states &&
         a.has_dfinal_states == b.has_dfinal_states &&
         a.return_dinitial_states == b.return_dinitial_states && a.device == b.device;
}

std::string BatchKey::DebugString() const {
  std::string s = absl::StrCat(OpName(op), "/", DTypeName(x_dtype), ".",
                               DTypeName(weight_dtype), "/D=", dim,
                               "/W=", width, "/",
                               activation == Activation::kSiLU ? "silu" : "none",
                               "/", layout == Layout::kChannelFirst ? "cf" : "cl");
  if (op == Op::kBackward) absl::StrAppend(&s, "/dw=", DTypeName(grad_weight_dtype));
  if (has_bias) absl::StrAppend(&s, "/bias");
  if (has_initial_states) absl::StrAppend(&s, "/init");
  if (return_final_states) absl::StrAppend(&s, "/final");
  if (has_dfinal_states) absl::StrAppend(&s, "/dfinal");
  if (return_dinitial_states) absl::StrAppend(&s, "/dinit");
  if (device >= 0) absl::StrAppend(&s, "/device=", device);
  return s;
}

std::string BatchKey::Family() const {
  return absl::StrCat(OpName(op), "/", DTypeName(x_dtype));
}

int64_t ConvSegment::bytes_moved() const {
  int64_t total = 0;
  for (int i = 0; i < kNumRoles; ++i) {
    if (present(RoleAt(i))) total += bytes(RoleAt(i));
  }
  return total;
}

}  // namespace conv1d
