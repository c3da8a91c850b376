// DecodeSession: one decode session held on a conv1d.v1 Decode stream, for
// the C++ client library (docs/sessions.md).
//
// Open() starts the stream on one of the client's channels and sends the
// open message; Step / Commit / Fork / Export then each send one message and
// wait for its answer; Close() ends the stream, which closes the session.
// A failed operation ends the stream (the server ends it with the error), so
// every later call answers FAILED_PRECONDITION.
//
// When the server drains, the operation in progress answers UNAVAILABLE and
// drained_state() holds the state [B, D, K] the server sent before it ended
// the stream: open a session with it as conv_state (on another replica) to
// continue where the stream stopped. An operation whose answer did not
// arrive did not happen: send it again there.
//
// Thread-safety: none; one thread at a time per DecodeSession. The client
// must outlive it.
#ifndef CONV1D_CLIENT_DECODE_SESSION_H_
#define CONV1D_CLIENT_DECODE_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/conv1d_client.h"
#include "conv1d/v1/conv1d.grpc.pb.h"

namespace conv1d {

class DecodeSession {
 public:
  // `timeout` bounds the whole stream; InfiniteDuration: none.
  static absl::StatusOr<std::unique_ptr<DecodeSession>> Open(
      Conv1dClient& client, const v1::OpenSessionRequest& open,
      absl::Duration timeout = absl::InfiniteDuration());
  ~DecodeSession();  // Close() if still open

  // The open's answer: session id, state length, the prefill's y.
  const v1::OpenSessionResponse& opened() const { return opened_; }
  const std::string& id() const { return opened_.session_id(); }

  // x [B, D, S] (or [B, S, D]) -> y of the same shape.
  absl::StatusOr<v1::Tensor> Step(const v1::Tensor& x);
  absl::Status Commit(int64_t accepted);
  // A new, detached session with a copy of the state; its id.
  absl::StatusOr<std::string> Fork();
  // The state [B, D, K], oldest first.
  absl::StatusOr<v1::Tensor> Export();
  // Ends the stream and the session; the stream's final status.
  absl::Status Close();

  // The state the server sent when it drained, once an operation answered
  // UNAVAILABLE because of it.
  const std::optional<v1::Tensor>& drained_state() const { return drained_state_; }

 private:
  DecodeSession() = default;
  // Sends `req` and reads the answer of kind `kind` into *resp.
  absl::Status Call(const v1::DecodeRequest& req, v1::DecodeResponse::KindCase kind,
                    v1::DecodeResponse* resp);
  // The stream ended: its status (and any drained state).
  absl::Status Ended();
  // Finishes the call and releases it; its status.
  absl::Status FinishCall();

  // Both released once the stream has ended, so that the server (which
  // keeps its last read open while the call lives) finishes it at once.
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>> stream_;
  v1::OpenSessionResponse opened_;
  std::optional<v1::Tensor> drained_state_;
  absl::Status ended_;  // non-OK once the stream has ended
  bool done_ = false;
  bool half_closed_ = false;  // WritesDone sent
};

// Tokens [t0, t0 + n) of an activation tensor [B, D, L] (or [B, L, D] when
// `channel_last`), as a tensor of the same dtype. REQUIRES: a valid rank-3
// tensor with 0 <= t0, t0 + n <= L.
v1::Tensor SliceTokens(const v1::Tensor& x, bool channel_last, int64_t t0, int64_t n);
// The pieces (same B, D, dtype) joined along the token axis.
v1::Tensor ConcatTokens(const std::vector<v1::Tensor>& pieces, bool channel_last);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_DECODE_SESSION_H_
