#include "client/decode_session.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeSession>> DecodeSession::Open(
    Conv1dClient& client, const v1::OpenSessionRequest& open, absl::Duration timeout) {
  std::unique_ptr<DecodeSession> s(new DecodeSession());
  s->ctx_ = std::make_unique<grpc::ClientContext>();
  client.PrepareStreamContext(s->ctx_.get(), timeout == absl::InfiniteDuration()
                                                 ? absl::InfiniteFuture()
                                                 : absl::Now() + timeout);
  s->stream_ = client.NextStub()->Decode(s->ctx_.get());
  v1::DecodeRequest req;
  *req.mutable_open() = open;
  v1::DecodeResponse resp;
  if (absl::Status st = s->Call(req, v1::DecodeResponse::kOpen, &resp); !st.ok()) return st;
  s->opened_ = std::move(*resp.mutable_open());
  return s;
}

DecodeSession::~DecodeSession() {
  if (stream_ != nullptr && !done_) Close().IgnoreError();
}

absl::Status DecodeSession::FinishCall() {
  // Half-close first: a server that ended the stream (a drain) while it
  // waited for our next message finishes the call at once instead of
  // waiting for that message until its drain deadline.
  if (!half_closed_) stream_->WritesDone();
  half_closed_ = true;
  const absl::Status st = ToAbsl(stream_->Finish());
  stream_.reset();
  ctx_.reset();
  return st;
}

absl::Status DecodeSession::Ended() {
  if (done_) return ended_;
  done_ = true;
  absl::Status st = FinishCall();
  ended_ = st.ok() ? absl::FailedPreconditionError("the Decode stream has ended") : st;
  return st.ok() ? absl::InternalError("the server ended the Decode stream early") : st;
}

absl::Status DecodeSession::Call(const v1::DecodeRequest& req,
                                 v1::DecodeResponse::KindCase kind,
                                 v1::DecodeResponse* resp) {
  if (done_) return ended_;
  const bool wrote = stream_->Write(req);
  if (!wrote || !stream_->Read(resp) || resp->draining()) {
    // The stream has ended. A drain sent the state before its UNAVAILABLE
    // (this operation did not happen); read what is left, so that Finish
    // does not wait on unread messages.
    if (wrote && resp->draining()) drained_state_ = resp->export_state().conv_state();
    v1::DecodeResponse extra;
    while (stream_->Read(&extra)) {
      if (extra.draining()) drained_state_ = extra.export_state().conv_state();
    }
    return Ended();
  }
  if (resp->kind_case() != kind) {
    ctx_->TryCancel();
    Ended().IgnoreError();
    ended_ = absl::InternalError(absl::StrCat("the server answered kind ", resp->kind_case(),
                                              ", expected ", kind));
    return ended_;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Tensor> DecodeSession::Step(const v1::Tensor& x) {
  v1::DecodeRequest req;
  *req.mutable_step()->mutable_x() = x;
  v1::DecodeResponse resp;
  if (absl::Status st = Call(req, v1::DecodeResponse::kStep, &resp); !st.ok()) return st;
  return std::move(*resp.mutable_step()->mutable_y());
}

absl::Status DecodeSession::Commit(int64_t accepted) {
  v1::DecodeRequest req;
  req.mutable_commit()->set_accepted(accepted);
  v1::DecodeResponse resp;
  return Call(req, v1::DecodeResponse::kCommit, &resp);
}

absl::StatusOr<std::string> DecodeSession::Fork() {
  v1::DecodeRequest req;
  req.mutable_fork();
  v1::DecodeResponse resp;
  if (absl::Status st = Call(req, v1::DecodeResponse::kFork, &resp); !st.ok()) return st;
  return resp.fork().session_id();
}

absl::StatusOr<v1::Tensor> DecodeSession::Export() {
  v1::DecodeRequest req;
  req.mutable_export_state();
  v1::DecodeResponse resp;
  if (absl::Status st = Call(req, v1::DecodeResponse::kExportState, &resp); !st.ok()) {
    return st;
  }
  return std::move(*resp.mutable_export_state()->mutable_conv_state());
}

absl::Status DecodeSession::Close() {
  if (done_) return ended_.code() == absl::StatusCode::kFailedPrecondition ? absl::OkStatus()
                                                                          : ended_;
  stream_->WritesDone();
  half_closed_ = true;
  v1::DecodeResponse extra;
  while (stream_->Read(&extra)) {
    if (extra.draining()) drained_state_ = extra.export_state().conv_state();
  }
  done_ = true;
  const absl::Status st = FinishCall();
  ended_ = st.ok() ? absl::FailedPreconditionError("the Decode stream has ended") : st;
  return st;
}

namespace {

int64_t ElemBytes(int wire_dtype) { return wire_dtype == v1::FP32 ? 4 : 2; }

}  // namespace

v1::Tensor SliceTokens(const v1::Tensor& x, bool channel_last, int64_t t0, int64_t n) {
  const int64_t b = x.shape(0), len = x.shape(channel_last ? 1 : 2);
  const int64_t d = x.shape(channel_last ? 2 : 1), e = ElemBytes(x.dtype());
  v1::Tensor out;
  out.set_dtype(x.dtype());
  out.add_shape(b);
  out.add_shape(channel_last ? n : d);
  out.add_shape(channel_last ? d : n);
  std::string* data = out.mutable_data();
  data->reserve(static_cast<size_t>(b * d * n * e));
  if (channel_last) {
    for (int64_t i = 0; i < b; ++i) data->append(x.data(), (i * len + t0) * d * e, n * d * e);
  } else {
    for (int64_t r = 0; r < b * d; ++r) data->append(x.data(), (r * len + t0) * e, n * e);
  }
  return out;
}

v1::Tensor ConcatTokens(const std::vector<v1::Tensor>& pieces, bool channel_last) {
  v1::Tensor out;
  if (pieces.empty()) return out;
  const v1::Tensor& first = pieces.front();
  const int64_t b = first.shape(0), d = first.shape(channel_last ? 2 : 1);
  const int64_t e = ElemBytes(first.dtype());
  int64_t len = 0;
  for (const v1::Tensor& p : pieces) len += p.shape(channel_last ? 1 : 2);
  out.set_dtype(first.dtype());
  out.add_shape(b);
  out.add_shape(channel_last ? len : d);
  out.add_shape(channel_last ? d : len);
  std::string* data = out.mutable_data();
  data->resize(static_cast<size_t>(b * d * len * e));
  int64_t t0 = 0;
  for (const v1::Tensor& p : pieces) {
    const int64_t n = p.shape(channel_last ? 1 : 2);
    if (channel_last) {
      for (int64_t i = 0; i < b; ++i) {
        p.data().copy(data->data() + (i * len + t0) * d * e, n * d * e, i * n * d * e);
      }
    } else {
      for (int64_t r = 0; r < b * d; ++r) {
        p.data().copy(data->data() + (r * len + t0) * e, n * e, r * n * e);
      }
    }
    t0 += n;
  }
  return out;
}

}  // namespace conv1d
