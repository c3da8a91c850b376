// Conv1dClient: the C++ client of the conv1d.v1 gRPC service.
//
// Typed sync and async calls for every RPC of conv1d.v1.Conv1d (from wire
// messages, or for the compute calls from TensorView arguments) plus
// grpc.health.v1 Health/Check; per-call deadlines; retries with exponential
// backoff and jitter on UNAVAILABLE / RESOURCE_EXHAUSTED (the server's
// `grpc-retry-pushback-ms` trailer wins over the computed delay); several
// channels (one TCP connection each), used round-robin, across one or more
// targets; 1 GiB message limit by default; TLS, mTLS and a bearer token
// (client_security.h). Results are absl::Status(Or).
//
// Used by the command-line client, the load generator and applications.
// Thread-safe: one client may be shared by any number of threads. Async
// callbacks run on gRPC's callback threads and must not block for long.
// The destructor waits until every async call it started has ended (its
// callback returned and its gRPC context is gone), so that no gRPC work of
// the client's calls is still running while its channels are destroyed or
// the process exits. It must not run on a callback thread.
#ifndef CONV1D_CLIENT_CONV1D_CLIENT_H_
#define CONV1D_CLIENT_CONV1D_CLIENT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/call_args.h"
#include "client/client_security.h"
#include "client/retry.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace conv1d {

struct ClientOptions {
  // host:port addresses; several targets are used round-robin (replicas).
  std::vector<std::string> targets = {"localhost:50051"};
  // Channels in all, spread over the targets; each is its own connection.
  int num_channels = 1;
  int64_t max_message_bytes = int64_t{1} << 30;
  // Deadline of a call (all its attempts) unless CallOptions says otherwise.
  absl::Duration default_timeout = absl::Seconds(60);
  RetryPolicy retry;
  // Queue calls while a channel connects instead of failing fast.
  bool wait_for_ready = false;
  // TLS, mTLS and the bearer token (client_security.h); default plaintext
  // without a token.
  ClientSecurity security;
};

struct CallOptions {
  absl::Duration timeout = absl::ZeroDuration();  // zero: the default
  int max_attempts = 0;                           // zero: the policy's
};

enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* HealthStatusName(HealthStatus s);

// Splits "a:1,b:2" into targets.
std::vector<std::string> SplitTargets(absl::string_view list);

class Conv1dClient {
 public:
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

  static absl::StatusOr<std::unique_ptr<Conv1dClient>> Create(ClientOptions options);
  ~Conv1dClient();

  absl::StatusOr<v1::ForwardResponse> Forward(const v1::ForwardRequest& req,
                                              const CallOptions& opts = {});
  absl::StatusOr<v1::BackwardResponse> Backward(const v1::BackwardRequest& req,
                                                const CallOptions& opts = {});
  absl::StatusOr<v1::UpdateResponse> Update(const v1::UpdateRequest& req,
                                            const CallOptions& opts = {});
  // The same calls from typed arguments (call_args.h): the request is built
  // from the views before the call starts.
  absl::StatusOr<v1::ForwardResponse> Forward(const ForwardArgs& args,
                                              const CallOptions& opts = {});
  absl::StatusOr<v1::BackwardResponse> Backward(const BackwardArgs& args,
                                                const CallOptions& opts = {});
  absl::StatusOr<v1::UpdateResponse> Update(const UpdateArgs& args,
                                            const CallOptions& opts = {});
  absl::StatusOr<v1::RegisterWeightsResponse> RegisterWeights(
      const v1::RegisterWeightsRequest& req, const CallOptions& opts = {});
  absl::StatusOr<v1::UnregisterWeightsResponse> UnregisterWeights(
      const v1::UnregisterWeightsRequest& req, const CallOptions& opts = {});
  absl::StatusOr<v1::ListWeightsResponse> ListWeights(const CallOptions& opts = {});
  absl::StatusOr<v1::ServerInfoResponse> ServerInfo(const CallOptions& opts = {});
  // Decode sessions by unary calls (Update with session_id steps them); a
  // Decode stream is DecodeSession (decode_session.h).
  absl::StatusOr<v1::OpenSessionResponse> OpenSession(const v1::OpenSessionRequest& req,
                                                      const CallOptions& opts = {});
  absl::StatusOr<v1::CommitSessionResponse> CommitSession(
      const v1::CommitSessionRequest& req, const CallOptions& opts = {});
  absl::StatusOr<v1::ForkSessionResponse> ForkSession(const v1::ForkSessionRequest& req,
                                                      const CallOptions& opts = {});
  absl::StatusOr<v1::ExportSessionResponse> ExportSession(
      const v1::ExportSessionRequest& req, const CallOptions& opts = {});
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(const v1::CloseSessionRequest& req,
                                                        const CallOptions& opts = {});
  // grpc.health.v1 Check; `service` "" asks about the whole server.
  absl::StatusOr<HealthStatus> Health(const std::string& service = "",
                                      const CallOptions& opts = {});

  // Async forms: the request is shared, not copied (large payloads), and must
  // not change until `done` runs. `done` runs exactly once.
  void ForwardAsync(std::shared_ptr<const v1::ForwardRequest> req,
                    const CallOptions& opts, Callback<v1::ForwardResponse> done);
  void BackwardAsync(std::shared_ptr<const v1::BackwardRequest> req,
                     const CallOptions& opts, Callback<v1::BackwardResponse> done);
  void UpdateAsync(std::shared_ptr<const v1::UpdateRequest> req,
                   const CallOptions& opts, Callback<v1::UpdateResponse> done);
  // Typed forms: the views need only live until these return.
  void ForwardAsync(const ForwardArgs& args, const CallOptions& opts,
                    Callback<v1::ForwardResponse> done);
  void BackwardAsync(const BackwardArgs& args, const CallOptions& opts,
                     Callback<v1::BackwardResponse> done);
  void UpdateAsync(const UpdateArgs& args, const CallOptions& opts,
                   Callback<v1::UpdateResponse> done);
  void RegisterWeightsAsync(std::shared_ptr<const v1::RegisterWeightsRequest> req,
                            const CallOptions& opts,
                            Callback<v1::RegisterWeightsResponse> done);
  void UnregisterWeightsAsync(std::shared_ptr<const v1::UnregisterWeightsRequest> req,
                              const CallOptions& opts,
                              Callback<v1::UnregisterWeightsResponse> done);
  void OpenSessionAsync(std::shared_ptr<const v1::OpenSessionRequest> req,
                        const CallOptions& opts, Callback<v1::OpenSessionResponse> done);
  void CommitSessionAsync(std::shared_ptr<const v1::CommitSessionRequest> req,
                          const CallOptions& opts, Callback<v1::CommitSessionResponse> done);
  void ForkSessionAsync(std::shared_ptr<const v1::ForkSessionRequest> req,
                        const CallOptions& opts, Callback<v1::ForkSessionResponse> done);
  void ExportSessionAsync(std::shared_ptr<const v1::ExportSessionRequest> req,
                          const CallOptions& opts, Callback<v1::ExportSessionResponse> done);
  void CloseSessionAsync(std::shared_ptr<const v1::CloseSessionRequest> req,
                         const CallOptions& opts, Callback<v1::CloseSessionResponse> done);
  void ListWeightsAsync(const CallOptions& opts, Callback<v1::ListWeightsResponse> done);
  void ServerInfoAsync(const CallOptions& opts, Callback<v1::ServerInfoResponse> done);
  void HealthAsync(const std::string& service, const CallOptions& opts,
                   Callback<HealthStatus> done);

  const ClientOptions& options() const { return options_; }
  int num_channels() const { return static_cast<int>(channels_.size()); }
  // The stub of the next channel (round-robin), for streaming calls.
  v1::Conv1d::Stub* NextStub() { return NextChannel().stub.get(); }
  // Readies a streaming call's context as the client's own calls are: the
  // deadline (InfiniteFuture: none), wait-for-ready and the bearer token.
  void PrepareStreamContext(grpc::ClientContext* ctx, absl::Time deadline) const;
  // One of the client's connections (round-robin), with its credentials, for
  // other services on the same server (e.g. server reflection).
  std::shared_ptr<grpc::Channel> channel() { return NextChannel().channel; }
  // Calls that were retried at least once since creation.
  int64_t retried_calls() const { return retried_calls_.load(); }

  // One connection and its stubs; public for the call machinery in the .cc.
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Conv1d::Stub> stub;
    std::unique_ptr<grpc::health::v1::Health::Stub> health;
  };

 private:
  explicit Conv1dClient(ClientOptions options) : options_(std::move(options)) {}
  template <typename Req, typename Resp, typename Invoke>
  void StartAsync(std::shared_ptr<const Req> req, const CallOptions& opts,
                  Invoke invoke, Callback<Resp> done);
  template <typename Req, typename Resp, typename Invoke>
  absl::StatusOr<Resp> CallSync(const Req& req, const CallOptions& opts, Invoke invoke);

  Channel& NextChannel();
  // An async call has ended: its callback returned and it is deleted.
  void AsyncCallEnded();

  ClientOptions options_;
  // "Bearer <token>", or empty: sent as `authorization` with every call.
  std::string authorization_;
  std::vector<Channel> channels_;
  std::atomic<uint64_t> next_channel_{0};
  std::atomic<int64_t> retried_calls_{0};
  absl::Mutex async_mu_;
  int64_t async_calls_ ABSL_GUARDED_BY(async_mu_) = 0;

  template <typename Req, typename Resp, typename Invoke>
  friend class AsyncCall;
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_CONV1D_CLIENT_H_
