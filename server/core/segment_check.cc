#include "server/core/segment_check.h"

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

// Roles that may be absent although the key uses them: outputs the caller
// did not ask for.
constexpr bool MayBeAbsent(Role r) {
  return r == Role::kFinalStates || r == Role::kDbias || r == Role::kDinitialStates;
}

// Columns (per row and channel) of a per-row role, or the element count of
// a per-request role.
int64_t PerUnit(const BatchKey& key, const ConvSegment& seg, Role role) {
  switch (ShapeOf(role)) {
    case RoleShape::kActivation: return seg.seqlen;
    case RoleShape::kState: return key.width - 1;
    case RoleShape::kConvState: return seg.state_len;
    case RoleShape::kWeight: return key.dim * key.width;
    case RoleShape::kBias: return key.dim;
  }
  return 0;
}

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

int64_t RoleElements(const BatchKey& key, const ConvSegment& seg, Role role,
                     int64_t rows) {
  const int64_t unit = PerUnit(key, seg, role);
  return IsPerRow(role) ? rows * key.dim * unit : unit;
}

absl::Status ValidateSegment(const BatchKey& key, const ConvSegment& s) {
  if (key.width < 1 || key.width > kMaxWidth) {
    return absl::InvalidArgumentError(
        absl::StrCat("width must be in [1, ", kMaxWidth, "], got ", key.width));
  }
  if (key.dim < 1) return absl::InvalidArgumentError(absl::StrCat("dim must be >= 1, got ", key.dim));
  if (s.batch < 0) return absl::InvalidArgumentError(absl::StrCat("batch must be >= 0, got ", s.batch));
  if (s.seqlen < 1) {
    return absl::InvalidArgumentError(absl::StrCat("seqlen must be >= 1, got ", s.seqlen));
  }
  if (key.op == Op::kUpdate && s.state_len < key.width - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv_state length ", s.state_len, " is shorter than width - 1 = ", key.width - 1));
  }
  const RoleSet roles = key.roles();
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    if (!roles.has(r)) continue;
    int64_t rows_dim = 0, elements = 0, bytes = 0;
    const int64_t unit = PerUnit(key, s, r);
    if (IsPerRow(r)) {
      if (MulOverflows(s.batch, key.dim, &rows_dim) || MulOverflows(rows_dim, unit, &elements)) {
        return absl::InvalidArgumentError(
            absl::StrCat(RoleName(r), " element count overflows int64"));
      }
    } else {
      elements = unit;
    }
    if (MulOverflows(elements, DTypeSize(key.dtype_of(r)), &bytes) ||
        bytes > (int64_t{1} << 60)) {
      return absl::InvalidArgumentError(absl::StrCat(RoleName(r), " byte count overflows int64"));
    }
    if (bytes == 0) continue;
    if (!s.present(r)) {
      if (MayBeAbsent(r)) continue;
      return absl::InvalidArgumentError(absl::StrCat(RoleName(r), " is required but absent"));
    }
    if (s.bytes(r) < bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(RoleName(r), " has ", s.bytes(r), " bytes, needs ", bytes));
    }
  }
  return absl::OkStatus();
}

int64_t OneRowBytes(const BatchKey& key, const ConvSegment& seg) {
  const RoleSet roles = key.roles();
  int64_t total = 0;
  for (int i = 0; i < kNumRoles; ++i) {
    if (roles.has(RoleAt(i))) total += RoleBytes(key, seg, RoleAt(i), 1);
  }
  return total;
}

absl::Status CheckServable(const BackendLimits& limits, const BatchKey& key,
                           const ConvSegment& seg) {
  if (absl::Status st = ValidateSegment(key, seg); !st.ok()) return st;
  return CheckBackendLimits(limits, key, seg);
}

absl::Status CheckBackendLimits(const BackendLimits& limits, const BatchKey& key,
                                const ConvSegment& seg) {
  if (limits.max_row_bytes < 0) return absl::OkStatus();
  const int64_t need = OneRowBytes(key, seg);
  if (need > limits.max_row_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "one sequence of this request moves ", need, " bytes, more than the backend holds at once (",
        limits.max_row_bytes, "); send shorter sequences or start the server with a larger --",
        limits.limit_flag));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DeviceAffinity(const BatchKey& key, const ConvSegment& seg) {
  const RoleSet roles = key.roles();
  int32_t device = -1;
  Role first = Role::kX;
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    if (!roles.has(r) || !seg.present(r) || !seg.where(r).on_device()) continue;
    const int32_t d = seg.where(r).device;
    if (device >= 0 && d != device) {
      return absl::FailedPreconditionError(absl::StrCat(
          RoleName(first), " is in memory of device ", device, " but ", RoleName(r),
          " in memory of device ", d, ": one request's device tensors must share a device"));
    }
    if (device < 0) first = r;
    device = d;
  }
  return device;
}

}  // namespace conv1d
