// The decode-session RPCs of Conv1dService: Decode (decode_stream.h), the
// unary OpenSession / CommitSession / ForkSession / ExportSession /
// CloseSession, and Update with a session_id. The operations themselves are
// SessionCalls'; this file binds them to calls, and checks that the caller
// may touch the session each call names (ownership.h).
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/frontend/conv1d_service.h"
#include "server/frontend/decode_stream.h"
#include "server/frontend/ownership.h"
#include "server/frontend/status_mapping.h"

namespace conv1d {
namespace {

absl::Status NoSessions() {
  return absl::UnimplementedError("this server's backend serves no decode sessions");
}

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point tp = context.deadline();
  if (tp == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(tp);
}

// A stream refused at once (no sessions on this backend).
class RefusedStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

template <typename Request, typename Response>
struct UnaryCall {
  Request request;
  Response response;
  std::shared_ptr<Session> session;
  Principal principal;  // the caller
};

}  // namespace

template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* Conv1dService::SessionCall(const char* method,
                                                     grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response,
                                                     Handle handle) {
  absl::Status status;
  CallInfo info = Begin(method, context, request, &status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_shared<UnaryCall<Request, Response>>();
  if (status.ok()) {
    status = sessions_ != nullptr ? ParseMessage(*request, &call->request) : NoSessions();
  }
  if (!status.ok()) {
    if (absl::IsInvalidArgument(status)) observer_->OnRejected(RejectReason::kInvalid);
    Finish(reactor, context, info, nullptr, response, status, /*retry_hint=*/false);
    return reactor;
  }
  info.request = &call->request;
  call->principal = info.principal;
  handle(call.get(), context, [this, reactor, context, info, call, response](
                                  const absl::Status& done) {
    if (absl::IsInvalidArgument(done)) observer_->OnRejected(RejectReason::kInvalid);
    Finish(reactor, context, info, &call->response, response, done);
  });
  return reactor;
}

namespace {

// The live session a unary request names, when `principal` may do `access`
// to it; INVALID_ARGUMENT for an empty id.
absl::StatusOr<std::shared_ptr<Session>> Named(SessionCalls& calls, const std::string& id,
                                               const Principal& principal,
                                               SessionAccess access) {
  if (id.empty()) return absl::InvalidArgumentError("session_id is empty");
  absl::StatusOr<std::shared_ptr<Session>> session = calls.manager()->Find(id);
  if (!session.ok()) return session.status();
  if (absl::Status s = MayAccessSession(principal, **session, access); !s.ok()) return s;
  return session;
}

}  // namespace

int Conv1dService::DrainSessionStreams() {
  return sessions_ != nullptr ? sessions_->DrainStreams() : 0;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Conv1dService::Decode(
    grpc::CallbackServerContext* context) {
  if (sessions_ == nullptr) return new RefusedStream(NoSessions());
  absl::StatusOr<Principal> principal =
      PrincipalOf(options_.auth.get(), context->client_metadata());
  if (!principal.ok()) return new RefusedStream(principal.status());
  return DecodeStream::Start(context, sessions_.get(), observer_,
                             request_ids_.Next(*context), options_.access_log.get(),
                             *std::move(principal));
}

grpc::ServerUnaryReactor* Conv1dService::OpenSession(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  using Call = UnaryCall<v1::OpenSessionRequest, v1::OpenSessionResponse>;
  return SessionCall<v1::OpenSessionRequest, v1::OpenSessionResponse>(
      "OpenSession", context, request, response,
      [this](Call* call, grpc::CallbackServerContext* ctx, SessionCalls::Done done) {
        sessions_->Open(call->request, "", /*attached=*/false, call->principal,
                        &call->response,
                        DeadlineOf(*ctx), [ctx] { return ctx->IsCancelled(); },
                        &call->session, std::move(done));
      });
}

grpc::ServerUnaryReactor* Conv1dService::CommitSession(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  using Call = UnaryCall<v1::CommitSessionRequest, v1::CommitSessionResponse>;
  return SessionCall<v1::CommitSessionRequest, v1::CommitSessionResponse>(
      "CommitSession", context, request, response,
      [this](Call* call, grpc::CallbackServerContext*, SessionCalls::Done done) {
        absl::StatusOr<std::shared_ptr<Session>> s = Named(
            *sessions_, call->request.session_id(), call->principal, SessionAccess::kUse);
        done(s.ok() ? sessions_->manager()->Commit(**s, call->request.accepted()) : s.status());
      });
}

grpc::ServerUnaryReactor* Conv1dService::ForkSession(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  using Call = UnaryCall<v1::ForkSessionRequest, v1::ForkSessionResponse>;
  return SessionCall<v1::ForkSessionRequest, v1::ForkSessionResponse>(
      "ForkSession", context, request, response,
      [this](Call* call, grpc::CallbackServerContext*, SessionCalls::Done done) {
        absl::StatusOr<std::shared_ptr<Session>> s = Named(
            *sessions_, call->request.session_id(), call->principal, SessionAccess::kUse);
        if (!s.ok()) return done(s.status());
        absl::StatusOr<std::shared_ptr<Session>> fork = sessions_->manager()->Fork(**s);
        if (!fork.ok()) return done(fork.status());
        call->response.set_session_id((*fork)->id());
        done(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* Conv1dService::ExportSession(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  using Call = UnaryCall<v1::ExportSessionRequest, v1::ExportSessionResponse>;
  return SessionCall<v1::ExportSessionRequest, v1::ExportSessionResponse>(
      "ExportSession", context, request, response,
      [this](Call* call, grpc::CallbackServerContext*, SessionCalls::Done done) {
        absl::StatusOr<std::shared_ptr<Session>> s = Named(
            *sessions_, call->request.session_id(), call->principal, SessionAccess::kUse);
        if (!s.ok()) return done(s.status());
        done(sessions_->Export(**s, call->response.mutable_conv_state()));
      });
}

grpc::ServerUnaryReactor* Conv1dService::CloseSession(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  using Call = UnaryCall<v1::CloseSessionRequest, v1::CloseSessionResponse>;
  return SessionCall<v1::CloseSessionRequest, v1::CloseSessionResponse>(
      "CloseSession", context, request, response,
      [this](Call* call, grpc::CallbackServerContext*, SessionCalls::Done done) {
        absl::StatusOr<std::shared_ptr<Session>> s = Named(
            *sessions_, call->request.session_id(), call->principal, SessionAccess::kClose);
        done(s.ok() ? sessions_->manager()->Close(**s) : s.status());
      });
}

void Conv1dService::SessionUpdate(grpc::ServerUnaryReactor* reactor,
                                  grpc::CallbackServerContext* context, const CallInfo& info,
                                  const v1::UpdateRequest& request,
                                  v1::UpdateResponse* message,
                                  const DetachedTensors* detached,
                                  std::shared_ptr<const void> keepalive,
                                  grpc::ByteBuffer* response) {
  absl::Status status = sessions_ != nullptr ? ValidateSessionUpdate(request) : NoSessions();
  absl::StatusOr<std::shared_ptr<Session>> session =
      status.ok() ? sessions_->manager()->Find(request.session_id())
                  : absl::StatusOr<std::shared_ptr<Session>>(status);
  if (session.ok()) {
    status = MayAccessSession(info.principal, **session, SessionAccess::kUse);
    if (!status.ok()) session = status;
  }
  if (!session.ok()) {
    if (absl::IsInvalidArgument(session.status())) {
      observer_->OnRejected(RejectReason::kInvalid);
    }
    Finish(reactor, context, info, nullptr, response, session.status());
    return;
  }
  sessions_->Step(
      *session, request.x(), request.has_x(), "x", detached, message->mutable_y(),
      DeadlineOf(*context), [context] { return context->IsCancelled(); },
      [this, reactor, context, info, message, response,
       keepalive = std::move(keepalive)](const absl::Status& done) {
        if (absl::IsInvalidArgument(done)) observer_->OnRejected(RejectReason::kInvalid);
        Finish(reactor, context, info, message, response, done);
      });
}

}  // namespace conv1d
