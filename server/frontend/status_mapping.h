// The one place where the service's absl::Status values become gRPC statuses.
//
// Used by every handler of the gRPC frontend (conv1d_service.cc), by the
// token check that runs before handlers (auth.cc: UNAUTHENTICATED,
// PERMISSION_DENIED pass through unchanged) and by nothing below them: the core, scheduler and backends speak absl::Status only.
// absl::StatusCode and grpc::StatusCode share their numbering (both follow
// google.rpc.Code), so the mapping keeps the code and the message; what it
// adds is the retry hint for overload answers.
//
// Pure functions; safe from any thread. AddRetryHint touches the call's
// ServerContext and must run before the call is finished.
#ifndef CONV1D_SERVER_FRONTEND_STATUS_MAPPING_H_
#define CONV1D_SERVER_FRONTEND_STATUS_MAPPING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace conv1d {

// Trailing-metadata key of the retry hint, understood by gRPC's retry
// policy: the client should wait this many milliseconds before retrying.
inline constexpr char kRetryPushbackKey[] = "grpc-retry-pushback-ms";
// The hint sent with RESOURCE_EXHAUSTED (queue full) and UNAVAILABLE
// (draining) answers.
inline constexpr int64_t kRetryPushbackMs = 50;

// Same code and message; codes outside the known range become UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The reverse, for tests and clients that compare codes.
absl::StatusCode FromGrpcCode(grpc::StatusCode code);

// True for the answers that say "try again later, elsewhere or slower".
bool IsRetryable(absl::StatusCode code);

// Adds `grpc-retry-pushback-ms` to the trailers when `status` is retryable.
void AddRetryHint(const absl::Status& status, grpc::ServerContextBase* context);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_STATUS_MAPPING_H_
