// Request ids and the per-call log lines of the gRPC frontend.
//
// Every RPC gets a request id: the client's `x-request-id` metadata when it
// sent a usable one (sanitized, see SanitizeRequestId), else one made here,
// "<8 hex digits, random per process>-<counter>". The id goes back to the
// client as the trailer `x-request-id`, and names the call in the debug log
// line and the access log line written when it finishes (LogFinishedCall).
//
// The debug line names method, id, peer, code, latency, byte counts and the
// request's tensors as dtype[shape] (DescribeTensors) — never their data.
// It is formatted only when the server's logger is at debug or below, so at
// the default level a call costs one level check.
//
// Used by Conv1dService only.
//
// Thread-safety: RequestIds::Next and the free functions may be called
// concurrently from any thread; they never block (the access log queues).
#ifndef CONV1D_SERVER_FRONTEND_REQUEST_LOG_H_
#define CONV1D_SERVER_FRONTEND_REQUEST_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "server/logging/access_log.h"

namespace conv1d {

// Metadata key of the request id, in both directions.
inline constexpr char kRequestIdKey[] = "x-request-id";
// Longer client ids are cut to this many bytes.
inline constexpr size_t kMaxRequestIdBytes = 64;

// The client's id as it will be logged and returned: at most
// kMaxRequestIdBytes bytes, every byte outside [A-Za-z0-9._:/+=@-] replaced
// by '_' (so an id can neither break a log line nor smuggle markup). Empty
// when `raw` is empty.
std::string SanitizeRequestId(std::string_view raw);

class RequestIds {
 public:
  RequestIds();
  // The id of the call: the client's (sanitized) x-request-id when present
  // and non-empty, else a new one.
  std::string Next(const grpc::ServerContextBase& context);

 private:
  std::string prefix_;
  std::atomic<uint64_t> next_{1};
};

// "x=fp32[2,64,128] weight=fp32[64,4] bias=fp32[64]": every conv1d.v1.Tensor
// set in `request` (also inside nested messages such as inline weights),
// plus a registered weight set's name. Never reads tensor data.
std::string DescribeTensors(const google::protobuf::Message& request);

// What the frontend knows when a call finishes.
struct FinishedCall {
  const char* method = "";
  std::string_view request_id;
  absl::Status status;           // as sent to the client
  absl::Duration latency;
  int64_t request_bytes = 0;
  int64_t response_bytes = 0;
  // The parsed request; null when it did not parse.
  const google::protobuf::Message* request = nullptr;
  // The authenticated principal; empty without authentication.
  std::string_view principal;
  // Weight changes: "register", "replace" or "unregister" and the set's
  // (valid) name; empty for other calls.
  std::string_view audit_action;
  std::string_view audit_weights;
};

// Writes the call's debug line (when debug is on) and its access log line
// (when `access_log` is non-null). REQUIRES: the call is not finished yet
// (the peer is read from `context`).
void LogFinishedCall(const FinishedCall& call, grpc::ServerContextBase* context,
                     AccessLog* access_log);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_REQUEST_LOG_H_
