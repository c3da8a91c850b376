#include "server/frontend/decode_stream.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/frontend/ownership.h"
#include "server/frontend/request_log.h"
#include "server/frontend/status_mapping.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {
namespace {

constexpr char kMethod[] = "Decode";

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point tp = context.deadline();
  if (tp == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(tp);
}

// A stream's commit/fork/export may repeat its own session's id, no other.
absl::Status CheckOwnId(const std::string& id, const Session& session,
                        absl::string_view field) {
  if (id.empty() || id == session.id()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is \"", id, "\"; on a Decode stream leave it unset (the stream's session is \"",
      session.id(), "\")"));
}

}  // namespace

DecodeStream::DecodeStream(grpc::CallbackServerContext* context, SessionCalls* calls,
                           Observer* observer, std::string request_id,
                           AccessLog* access_log, Principal principal)
    : context_(context),
      calls_(calls),
      observer_(observer),
      request_id_(std::move(request_id)),
      access_log_(access_log),
      principal_(std::move(principal)),
      start_(absl::Now()),
      deadline_(DeadlineOf(*context)) {}

DecodeStream* DecodeStream::Start(grpc::CallbackServerContext* context, SessionCalls* calls,
                                  Observer* observer, std::string request_id,
                                  AccessLog* access_log, Principal principal) {
  std::shared_ptr<DecodeStream> stream(new DecodeStream(
      context, calls, observer, std::move(request_id), access_log, std::move(principal)));
  stream->self_ = stream;
  observer->OnRequestStart(kMethod);
  if (calls->draining()) {
    stream->End(absl::UnavailableError("the server is draining; open the session elsewhere"),
                nullptr);
    return stream.get();
  }
  calls->AddStream(stream);
  {
    absl::MutexLock lock(&stream->mu_);
    stream->phase_ = Phase::kReading;
  }
  stream->StartRead(&stream->in_);
  // A drain that began before AddStream did not see this stream.
  if (calls->draining()) stream->Drain();
  return stream.get();
}

void DecodeStream::OnReadDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    // Another phase: a drain took over while this read was outstanding.
    if (phase_ != Phase::kReading) return;
    phase_ = Phase::kBusy;
  }
  if (!ok) return End(absl::OkStatus(), nullptr);  // the client ended its side
  bytes_received_ += static_cast<int64_t>(in_.Length());
  const absl::Status status = ParseMessage(in_, &req_);
  if (!status.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
    return End(status, nullptr);
  }
  Handle();
}

void DecodeStream::Handle() {
  resp_.Clear();
  auto reply = [this](const absl::Status& status) { Reply(status); };
  auto cancelled = [context = context_] { return context->IsCancelled(); };
  const auto kind = req_.kind_case();
  if (kind == v1::DecodeRequest::KIND_NOT_SET) {
    return Reply(absl::InvalidArgumentError(
        "DecodeRequest: none of open, step, commit, fork, export_state is set"));
  }
  if (kind == v1::DecodeRequest::kOpen) {
    if (session_ != nullptr) {
      return Reply(absl::InvalidArgumentError(absl::StrCat(
          "open: this stream already holds session \"", session_->id(),
          "\"; a Decode stream holds one session")));
    }
    const v1::OpenSessionRequest& open = req_.open();
    if (open.session_id().empty()) {
      return calls_->Open(open, "open.", /*attached=*/true, principal_, resp_.mutable_open(),
                          deadline_, cancelled, &session_, reply);
    }
    if (open.weights_case() != v1::OpenSessionRequest::WEIGHTS_NOT_SET ||
        open.has_conv_state() || open.has_prefill()) {
      return Reply(absl::InvalidArgumentError(
          "open.session_id: taking over a session, leave weights, conv_state and prefill "
          "unset"));
    }
    absl::StatusOr<std::shared_ptr<Session>> found = calls_->manager()->Find(open.session_id());
    if (!found.ok()) return Reply(found.status());
    if (absl::Status s = MayAccessSession(principal_, **found, SessionAccess::kUse); !s.ok()) {
      return Reply(s);
    }
    if (absl::Status s = calls_->manager()->Attach(**found); !s.ok()) return Reply(s);
    session_ = *std::move(found);
    const SessionSpec& spec = session_->spec();
    v1::OpenSessionResponse* r = resp_.mutable_open();
    r->set_session_id(session_->id());
    r->set_state_len(spec.state_len);
    r->set_dim(spec.key.dim);
    r->set_width(spec.key.width);
    return Reply(absl::OkStatus());
  }
  if (session_ == nullptr) {
    return Reply(absl::InvalidArgumentError(
        "open: no session is open on this stream; its first message must be open"));
  }
  SessionManager* manager = calls_->manager();
  switch (kind) {
    case v1::DecodeRequest::kStep:
      return calls_->Step(session_, req_.step().x(), req_.step().has_x(), "step.x", nullptr,
                          resp_.mutable_step()->mutable_y(), deadline_, cancelled, reply);
    case v1::DecodeRequest::kCommit: {
      absl::Status s = CheckOwnId(req_.commit().session_id(), *session_, "commit.session_id");
      if (s.ok()) s = manager->Commit(*session_, req_.commit().accepted());
      resp_.mutable_commit();
      return Reply(s);
    }
    case v1::DecodeRequest::kFork: {
      absl::Status s = CheckOwnId(req_.fork().session_id(), *session_, "fork.session_id");
      if (!s.ok()) return Reply(s);
      absl::StatusOr<std::shared_ptr<Session>> fork = manager->Fork(*session_);
      if (!fork.ok()) return Reply(fork.status());
      resp_.mutable_fork()->set_session_id((*fork)->id());
      return Reply(absl::OkStatus());
    }
    case v1::DecodeRequest::kExportState: {
      absl::Status s = CheckOwnId(req_.export_state().session_id(), *session_,
                                  "export_state.session_id");
      if (s.ok()) s = calls_->Export(*session_, resp_.mutable_export_state()->mutable_conv_state());
      return Reply(s);
    }
    default:
      return Reply(absl::InvalidArgumentError("DecodeRequest: unknown kind"));
  }
}

absl::Status DecodeStream::SerializeResponse() {
  out_.Clear();  // the previous answer has been sent
  bool own_buffer = false;
  grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(
      resp_, &out_, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("response: ", s.error_message()));
  return absl::OkStatus();
}

void DecodeStream::Reply(const absl::Status& status) {
  if (!status.ok()) {
    if (absl::IsInvalidArgument(status)) observer_->OnRejected(RejectReason::kInvalid);
    return End(status, nullptr);
  }
  if (absl::Status s = SerializeResponse(); !s.ok()) return End(s, nullptr);
  bytes_sent_ += static_cast<int64_t>(out_.Length());
  StartWrite(&out_);
}

void DecodeStream::OnWriteDone(bool ok) {
  if (!ok) return End(absl::CancelledError("the client went away"), nullptr);
  req_.Clear();
  bool drain = false;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kBusy) return;
    drain = draining_;
    if (!drain) phase_ = Phase::kReading;
  }
  if (drain) return FinishDraining();
  StartRead(&in_);
}

void DecodeStream::Drain() {
  {
    absl::MutexLock lock(&mu_);
    if (draining_ || phase_ == Phase::kFinished) return;
    draining_ = true;
    // Busy: the answer in flight is written first (OnWriteDone drains).
    if (phase_ != Phase::kReading) return;
    phase_ = Phase::kBusy;
  }
  FinishDraining();
}

void DecodeStream::FinishDraining() {
  const absl::Status unavailable = absl::UnavailableError(
      "the server is draining; the session's state was sent as the last message "
      "(export_state, draining): open it on another server to continue");
  if (session_ == nullptr) return End(unavailable, nullptr);
  resp_.Clear();
  resp_.set_draining(true);
  absl::Status s = calls_->Export(*session_, resp_.mutable_export_state()->mutable_conv_state());
  if (s.ok()) s = SerializeResponse();
  if (!s.ok()) return End(s, nullptr);
  End(unavailable, &out_);
}

void DecodeStream::End(const absl::Status& status, const grpc::ByteBuffer* last) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kFinished) return;
    phase_ = Phase::kFinished;
  }
  if (session_ != nullptr) calls_->manager()->Close(*session_).IgnoreError();
  const int64_t last_bytes = last != nullptr ? static_cast<int64_t>(last->Length()) : 0;
  const absl::Duration latency = absl::Now() - start_;
  observer_->OnRequestDone(kMethod, status.code(), latency, bytes_received_,
                           bytes_sent_ + last_bytes);
  FinishedCall finished;
  finished.method = kMethod;
  finished.request_id = request_id_;
  finished.status = status;
  finished.latency = latency;
  finished.request_bytes = bytes_received_;
  finished.response_bytes = bytes_sent_ + last_bytes;
  finished.principal = principal_.name;
  LogFinishedCall(finished, context_, access_log_);
  context_->AddTrailingMetadata(kRequestIdKey, request_id_);
  if (last != nullptr) {
    StartWriteAndFinish(last, grpc::WriteOptions(), ToGrpcStatus(status));
  } else {
    Finish(ToGrpcStatus(status));
  }
}

void DecodeStream::OnDone() {
  std::shared_ptr<DecodeStream> me = std::move(self_);
  calls_->RemoveStream(this);
  // `me` may be the last reference: this object ends with the scope.
}

}  // namespace conv1d
