// Validation of the decode-session messages of conv1d.v1 (OpenSessionRequest,
// a step's x, an Update naming a session) into the core's SessionSpec and
// tensor views (docs/sessions.md).
//
// Used by SessionCalls (session_calls.h) and by tests. Like validation.h it
// reads only the messages' fields and sizes, allocates nothing sized by a
// request before it is valid, and answers INVALID_ARGUMENT naming the field
// (NOT_FOUND for an unknown weights_name).
//
// Rules, beyond validation.h's for tensors:
//   - open: weights (registered name or inline [D, W] with optional bias);
//     dtype set (x's dtype); batch >= 1; state_len 0 (meaning max(W-1, 1)) or
//     >= max(W-1, 1); 0 <= max_draft_tokens <= kMaxDraftTokens; optional
//     conv_state [B, D, K] of dtype; optional prefill x [B, D, L] (or
//     [B, L, D]) of dtype, L >= 1;
//   - step x: [B, D, S] (or [B, S, D]) with the session's dtype, B and D,
//     S >= 1;
//   - an Update naming a session carries x only: conv_state, weights, layout
//     and activation must be unset.
//
// Pure functions; safe from any thread while the messages are not modified.
#ifndef CONV1D_SERVER_FRONTEND_SESSION_VALIDATION_H_
#define CONV1D_SERVER_FRONTEND_SESSION_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "conv1d/v1/conv1d.pb.h"
#include "server/core/session_manager.h"
#include "server/core/weight_registry.h"
#include "server/frontend/validation.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

inline constexpr int32_t kMaxDraftTokens = 4096;

struct ValidatedOpen {
  // Weights owned by spec.weights_owner (the registered set, or a copy of
  // the inline weights).
  SessionSpec spec;
  // Views into the request: the initial state and the prefill's x; absent
  // (data == nullptr) when not sent.
  TensorView conv_state;
  TensorView prefill;
};

// `prefix` is prepended to field names in messages ("open." on a stream).
absl::Status ValidateOpenSession(const v1::OpenSessionRequest& request,
                                 const WeightRegistry& registry,
                                 const ValidationLimits& limits, absl::string_view prefix,
                                 ValidatedOpen* out);

// A step's x against the session's spec; `detached` may be null.
absl::Status ValidateSessionX(const v1::Tensor& x, bool present, absl::string_view field,
                              const SessionSpec& spec, const ValidationLimits& limits,
                              const DetachedTensors* detached, TensorView* view);

// An Update with session_id: only x and session_id may be set.
absl::Status ValidateSessionUpdate(const v1::UpdateRequest& request);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_SESSION_VALIDATION_H_
