// The one check that a ConvSegment matches its BatchKey, used by every
// backend and by the frontends before a task is submitted, and the sizes of
// each role's tensor derived from the key and the segment.
//
// Rules: 1 <= width <= kMaxWidth, dim >= 1, batch >= 0, seqlen >= 1, and for
// the update state_len >= width - 1; every role the key uses (BatchKey::roles)
// is present when required and holds at least its bytes; element and byte
// counts fit in int64. Optional outputs (final_states, dbias,
// dinitial_states) may be absent: "not requested".
//
// Pure functions; safe from any thread.
#ifndef CONV1D_SERVER_CORE_SEGMENT_CHECK_H_
#define CONV1D_SERVER_CORE_SEGMENT_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/backend.h"
#include "server/core/conv_problem.h"

namespace conv1d {

// Elements of `role`'s tensor for `rows` rows of `seg` (rows = seg.batch for
// the whole request; per-request roles ignore rows). REQUIRES: the sizes
// passed ValidateSegment (no overflow).
int64_t RoleElements(const BatchKey& key, const ConvSegment& seg, Role role,
                     int64_t rows);
inline int64_t RoleBytes(const BatchKey& key, const ConvSegment& seg, Role role,
                         int64_t rows) {
  return RoleElements(key, seg, role, rows) * DTypeSize(key.dtype_of(role));
}

// OK when `seg` is a well-formed request of `key`; INVALID_ARGUMENT naming
// the size or the role's tensor otherwise.
absl::Status ValidateSegment(const BatchKey& key, const ConvSegment& seg);

// The device whose memory holds `seg`'s tensors that are in device memory
// (a session's state slot, a registered device region), or -1 when every
// tensor is in host memory: what the task's BatchKey::device must be.
// FAILED_PRECONDITION naming the roles when they sit on two devices.
absl::StatusOr<int32_t> DeviceAffinity(const BatchKey& key, const ConvSegment& seg);

// Bytes of every tensor the key uses for one row (B = 1) of `seg`, weights
// included: what a backend that moves requests row by row must hold at once.
int64_t OneRowBytes(const BatchKey& key, const ConvSegment& seg);

// The backend's limits: RESOURCE_EXHAUSTED naming the flag that raises the
// bound when one row moves more than max_row_bytes. Reads sizes only.
absl::Status CheckBackendLimits(const BackendLimits& limits, const BatchKey& key,
                                const ConvSegment& seg);

// ValidateSegment, then CheckBackendLimits.
absl::Status CheckServable(const BackendLimits& limits, const BatchKey& key,
                           const ConvSegment& seg);

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_SEGMENT_CHECK_H_
