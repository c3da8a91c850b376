#include "server/frontend/status_mapping.h"

#include <string>

#include "absl/strings/str_cat.h"

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
  // gRPC sends the message as a trailer; a long one would exceed the
  // client's metadata limit and turn the answer into RESOURCE_EXHAUSTED.
  absl::string_view message = status.message();
  if (message.size() > kMaxStatusMessageBytes) {
    return grpc::Status(code, absl::StrCat(message.substr(0, kMaxStatusMessageBytes),
                                           "... (", message.size(), " bytes)"));
  }
  return grpc::Status(code, std::string(message));
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
