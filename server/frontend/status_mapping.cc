#include "server/frontend/status_mapping.h"

#include <string>

namespace conv1d {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int raw = static_cast<int>(status.code());
  // absl::StatusCode and grpc::StatusCode both number the codes as
  // google.rpc.Code does: OK = 0 ... UNAUTHENTICATED = 16.
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  if (raw > 0 && raw <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) {
    code = static_cast<grpc::StatusCode>(raw);
  }
  return grpc::Status(code, std::string(status.message()));
}

absl::StatusCode FromGrpcCode(grpc::StatusCode code) {
  const int raw = static_cast<int>(code);
  if (raw >= 0 && raw <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return static_cast<absl::StatusCode>(raw);
  }
  return absl::StatusCode::kUnknown;
}

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kUnavailable;
}

void AddRetryHint(const absl::Status& status, grpc::ServerContextBase* context) {
  if (context == nullptr || !IsRetryable(status.code())) return;
  context->AddTrailingMetadata(kRetryPushbackKey,
                               std::to_string(kRetryPushbackMs));
}

}  // namespace conv1d
