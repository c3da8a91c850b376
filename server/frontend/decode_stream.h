// DecodeStream: the reactor of one conv1d.v1 Decode call, a bidirectional
// stream that owns one decode session (docs/sessions.md).
//
// The first message must open the session (or take over a detached one by
// id, when the caller may: ownership.h); then steps, commits, forks and
// exports follow, each answered by one response of the same kind, in order:
// the stream reads the next message only once the previous one is answered,
// so one operation at a time runs on the session. Any error ends the stream with its status (the code and a
// message naming the field) and closes the session; so does the client's
// end of the stream (with OK). A stream never blocks a gRPC thread: steps
// are answered from their task's on_done.
//
// Drain: Drain() (from SessionCalls::DrainStreams) makes the stream, once
// its operation in flight is answered, send one `export_state` response
// with `draining` set, close the session and end with UNAVAILABLE, so the
// client can open the same state on another replica.
//
// Each stream is one call for the request log: the `x-request-id` trailer,
// one access log line (with the caller's principal) and the method's metrics
// when it ends. A session the stream opens belongs to its caller.
//
// Lifetime: Start() creates the reactor, owned by itself until OnDone (and,
// briefly, by a drain that holds a reference).
// Thread-safety: gRPC reactions, on_done callbacks and Drain may run on
// different threads; one mutex guards the stream's phase.
#ifndef CONV1D_SERVER_FRONTEND_DECODE_STREAM_H_
#define CONV1D_SERVER_FRONTEND_DECODE_STREAM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "conv1d/v1/conv1d.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/core/observer.h"
#include "server/core/session_manager.h"
#include "server/frontend/auth.h"
#include "server/frontend/session_calls.h"
#include "server/logging/access_log.h"

namespace conv1d {

class DecodeStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public std::enable_shared_from_this<DecodeStream> {
 public:
  // Starts serving `context`'s call; the returned reactor lives until OnDone.
  // `request_id` goes back as the `x-request-id` trailer and names the call
  // in its log lines; `access_log` may be null. `principal` is the
  // authenticated caller (auth.h's PrincipalOf).
  static DecodeStream* Start(grpc::CallbackServerContext* context, SessionCalls* calls,
                             Observer* observer, std::string request_id,
                             AccessLog* access_log, Principal principal);

  // See the header. Thread-safe; idempotent.
  void Drain();

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // kReading: a read is outstanding, nothing else runs. kBusy: a message is
  // being handled or its answer written. kFinished: Finish was called.
  enum class Phase { kReading, kBusy, kFinished };

  DecodeStream(grpc::CallbackServerContext* context, SessionCalls* calls,
               Observer* observer, std::string request_id, AccessLog* access_log,
               Principal principal);

  // Handles req_ (phase kBusy); ends with Reply.
  void Handle();
  // Writes resp_ (OK) or ends the stream with `status`.
  void Reply(const absl::Status& status);
  // Exports the state into resp_ and ends with UNAVAILABLE. REQUIRES: the
  // phase was kReading or kBusy with nothing in flight; called without mu_.
  void FinishDraining();
  // Closes the session and finishes the call with `status` (and, when
  // `last` is non-null, that last message).
  void End(const absl::Status& status, const grpc::ByteBuffer* last);
  // Serializes resp_ into out_.
  absl::Status SerializeResponse();

  grpc::CallbackServerContext* const context_;
  SessionCalls* const calls_;
  Observer* const observer_;
  const std::string request_id_;
  AccessLog* const access_log_;  // may be null
  const Principal principal_;
  const absl::Time start_;
  const absl::Time deadline_;
  std::shared_ptr<DecodeStream> self_;  // released in OnDone

  // Touched only by the thread handling the current message (kBusy).
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  v1::DecodeRequest req_;
  v1::DecodeResponse resp_;
  std::shared_ptr<Session> session_;
  int64_t bytes_received_ = 0;
  int64_t bytes_sent_ = 0;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kBusy;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_DECODE_STREAM_H_
