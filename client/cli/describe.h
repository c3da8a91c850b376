// `conv1d_client describe`: what a server offers, read by gRPC server
// reflection (grpc.reflection.v1alpha) — its services, each method with its
// request and response types, and the fields of every message those use —
// so that no separate reflection tool is needed.
//
// Used by client/cli/main.cc only. One call at a time; not thread-safe.
#ifndef CONV1D_CLIENT_CLI_DESCRIBE_H_
#define CONV1D_CLIENT_CLI_DESCRIBE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace conv1d {

// Text description of `symbol` (a service, method or message, fully
// qualified, e.g. conv1d.v1.Conv1d or conv1d.v1.ForwardRequest), or of every
// service when `symbol` is empty. UNIMPLEMENTED when the server has no
// reflection; NOT_FOUND for an unknown symbol.
absl::StatusOr<std::string> DescribeByReflection(std::shared_ptr<grpc::Channel> channel,
                                                 const std::string& symbol,
                                                 absl::Duration timeout);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_CLI_DESCRIBE_H_
