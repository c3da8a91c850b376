#include "client/conv1d_client.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/host_tensor.h"
#include "grpcpp/alarm.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace conv1d {

namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

double JitterSample() {
  thread_local FastRng rng(
      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
      reinterpret_cast<uintptr_t>(&rng));
  return rng.UniformDouble();
}

Pushback FindPushback(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find("grpc-retry-pushback-ms");
  if (it == trailers.end()) return Pushback{};
  return ParsePushback(absl::string_view(it->second.data(), it->second.size()));
}

void PrepareContext(grpc::ClientContext* ctx, absl::Time deadline, bool wait_for_ready,
                    const std::string& authorization) {
  if (deadline != absl::InfiniteFuture()) ctx->set_deadline(absl::ToChronoTime(deadline));
  ctx->set_wait_for_ready(wait_for_ready);
  if (!authorization.empty()) ctx->AddMetadata("authorization", authorization);
}

}  // namespace

const char* HealthStatusName(HealthStatus s) {
  switch (s) {
    case HealthStatus::kUnknown: return "UNKNOWN";
    case HealthStatus::kServing: return "SERVING";
    case HealthStatus::kNotServing: return "NOT_SERVING";
    case HealthStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
  }
  return "?";
}

std::vector<std::string> SplitTargets(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view t : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(t));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Conv1dClient>> Conv1dClient::Create(ClientOptions options) {
  if (options.targets.empty()) return absl::InvalidArgumentError("no target address given");
  if (options.num_channels < 1) options.num_channels = 1;
  if (options.retry.max_attempts < 1) {
    return absl::InvalidArgumentError("retry.max_attempts must be >= 1");
  }
  if (options.max_message_bytes <= 0 || options.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError("max_message_bytes must be in [1, 2^31)");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<std::string> authorization = AuthorizationHeader(options.security);
  if (!authorization.ok()) return authorization.status();
  std::unique_ptr<Conv1dClient> c(new Conv1dClient(std::move(options)));
  c->authorization_ = std::move(*authorization);
  const ClientOptions& o = c->options_;
  const int n = std::max<int>(o.num_channels, static_cast<int>(o.targets.size()));
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
    args.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
    // Without these, channels with equal arguments share one subchannel and
    // so one TCP connection, which defeats spreading load over channels.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("conv1d.client_channel_index", i);
    Channel ch;
    ch.channel = grpc::CreateCustomChannel(o.targets[i % o.targets.size()],
                                           *credentials, args);
    ch.stub = v1::Conv1d::NewStub(ch.channel);
    ch.health = grpc::health::v1::Health::NewStub(ch.channel);
    c->channels_.push_back(std::move(ch));
  }
  return c;
}

Conv1dClient::~Conv1dClient() {
  absl::MutexLock lock(&async_mu_);
  async_mu_.Await(absl::Condition(
      +[](int64_t* calls) { return *calls == 0; }, &async_calls_));
}

void Conv1dClient::AsyncCallEnded() {
  absl::MutexLock lock(&async_mu_);
  --async_calls_;
}

void Conv1dClient::PrepareStreamContext(grpc::ClientContext* ctx, absl::Time deadline) const {
  PrepareContext(ctx, deadline, options_.wait_for_ready, authorization_);
}

Conv1dClient::Channel& Conv1dClient::NextChannel() {
  return channels_[next_channel_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
}

// One async call with its retries; deletes itself after calling `done`.
template <typename Req, typename Resp, typename Invoke>
class AsyncCall {
 public:
  AsyncCall(Conv1dClient* client, std::shared_ptr<const Req> req, absl::Time deadline,
            int max_attempts, Invoke invoke, Conv1dClient::Callback<Resp> done)
      : client_(client), req_(std::move(req)), deadline_(deadline),
        max_attempts_(max_attempts), invoke_(std::move(invoke)), done_(std::move(done)) {}

  void Attempt() {
    ++attempt_;
    ctx_ = std::make_unique<grpc::ClientContext>();
    PrepareContext(ctx_.get(), deadline_, client_->options_.wait_for_ready,
                   client_->authorization_);
    resp_.Clear();
    invoke_(client_->NextChannel(), ctx_.get(), req_.get(), &resp_,
            [this](grpc::Status s) { OnDone(std::move(s)); });
  }

 private:
  // Runs `done_` and deletes the call; the client's count of calls in
  // flight drops only after that, when nothing of the call is left.
  template <typename Result>
  void End(Result result) {
    Conv1dClient* client = client_;
    done_(std::move(result));
    delete this;
    client->AsyncCallEnded();
  }

  void OnDone(grpc::Status s) {
    if (s.ok()) {
      End(std::move(resp_));
      return;
    }
    absl::Status status = ToAbsl(s);
    const RetryPolicy& policy = client_->options_.retry;
    if (attempt_ < max_attempts_ && policy.IsRetryable(status.code())) {
      const Pushback pb = FindPushback(*ctx_);
      if (!pb.dont_retry) {
        const absl::Time when = absl::Now() + BackoffDelay(policy, attempt_, JitterSample(), pb);
        if (when < deadline_) {
          if (attempt_ == 1) client_->retried_calls_.fetch_add(1);
          alarm_ = std::make_unique<grpc::Alarm>();
          // Attempt() is the last thing the alarm callback touches.
          alarm_->Set(absl::ToChronoTime(when), [this](bool) { Attempt(); });
          return;
        }
      }
    }
    End(std::move(status));
  }

  Conv1dClient* client_;
  std::shared_ptr<const Req> req_;
  absl::Time deadline_;
  int max_attempts_;
  Invoke invoke_;
  Conv1dClient::Callback<Resp> done_;
  int attempt_ = 0;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::Alarm> alarm_;
  Resp resp_;
};

template <typename Req, typename Resp, typename Invoke>
void Conv1dClient::StartAsync(std::shared_ptr<const Req> req, const CallOptions& opts,
                              Invoke invoke, Callback<Resp> done) {
  const absl::Duration timeout =
      opts.timeout > absl::ZeroDuration() ? opts.timeout : options_.default_timeout;
  const int attempts = opts.max_attempts > 0 ? opts.max_attempts : options_.retry.max_attempts;
  {
    absl::MutexLock lock(&async_mu_);
    ++async_calls_;
  }
  auto* call = new AsyncCall<Req, Resp, Invoke>(this, std::move(req), absl::Now() + timeout,
                                                attempts, std::move(invoke), std::move(done));
  call->Attempt();
}

template <typename Req, typename Resp, typename Invoke>
absl::StatusOr<Resp> Conv1dClient::CallSync(const Req& req, const CallOptions& opts,
                                            Invoke invoke) {
  const absl::Duration timeout =
      opts.timeout > absl::ZeroDuration() ? opts.timeout : options_.default_timeout;
  const absl::Time deadline = absl::Now() + timeout;
  const int attempts = opts.max_attempts > 0 ? opts.max_attempts : options_.retry.max_attempts;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, deadline, options_.wait_for_ready, authorization_);
    Resp resp;
    absl::Status status = ToAbsl(invoke(NextChannel(), &ctx, req, &resp));
    if (status.ok()) return resp;
    if (attempt >= attempts || !options_.retry.IsRetryable(status.code())) return status;
    const Pushback pb = FindPushback(ctx);
    if (pb.dont_retry) return status;
    const absl::Duration delay = BackoffDelay(options_.retry, attempt, JitterSample(), pb);
    if (absl::Now() + delay >= deadline) return status;
    if (attempt == 1) retried_calls_.fetch_add(1);
    absl::SleepFor(delay);
  }
}

// The per-method glue: which stub method a call invokes.
#define CONV1D_CLIENT_METHOD(Name, Req, Resp)                                          \
  absl::StatusOr<v1::Resp> Conv1dClient::Name(const v1::Req& req,                      \
                                              const CallOptions& opts) {               \
    return CallSync<v1::Req, v1::Resp>(                                                \
        req, opts,                                                                     \
        [](Channel& ch, grpc::ClientContext* ctx, const v1::Req& r, v1::Resp* out) {   \
          return ch.stub->Name(ctx, r, out);                                           \
        });                                                                            \
  }                                                                                    \
  void Conv1dClient::Name##Async(std::shared_ptr<const v1::Req> req,                   \
                                 const CallOptions& opts, Callback<v1::Resp> done) {   \
    StartAsync<v1::Req, v1::Resp>(                                                     \
        std::move(req), opts,                                                          \
        [](Channel& ch, grpc::ClientContext* ctx, const v1::Req* r, v1::Resp* out,     \
           std::function<void(grpc::Status)> cb) {                                     \
          ch.stub->async()->Name(ctx, r, out, std::move(cb));                          \
        },                                                                             \
        std::move(done));                                                              \
  }

CONV1D_CLIENT_METHOD(Forward, ForwardRequest, ForwardResponse)
CONV1D_CLIENT_METHOD(Backward, BackwardRequest, BackwardResponse)
CONV1D_CLIENT_METHOD(Update, UpdateRequest, UpdateResponse)
CONV1D_CLIENT_METHOD(RegisterWeights, RegisterWeightsRequest, RegisterWeightsResponse)
CONV1D_CLIENT_METHOD(UnregisterWeights, UnregisterWeightsRequest, UnregisterWeightsResponse)
CONV1D_CLIENT_METHOD(OpenSession, OpenSessionRequest, OpenSessionResponse)
CONV1D_CLIENT_METHOD(CommitSession, CommitSessionRequest, CommitSessionResponse)
CONV1D_CLIENT_METHOD(ForkSession, ForkSessionRequest, ForkSessionResponse)
CONV1D_CLIENT_METHOD(ExportSession, ExportSessionRequest, ExportSessionResponse)
CONV1D_CLIENT_METHOD(CloseSession, CloseSessionRequest, CloseSessionResponse)
#undef CONV1D_CLIENT_METHOD

// Typed compute calls: build the wire request now, then as above.
#define CONV1D_CLIENT_TYPED_METHOD(Name, Args, Make, Req, Resp)                           \
  absl::StatusOr<v1::Resp> Conv1dClient::Name(const Args& args, const CallOptions& opts) { \
    return Name(Make(args), opts);                                                         \
  }                                                                                        \
  void Conv1dClient::Name##Async(const Args& args, const CallOptions& opts,                \
                                 Callback<v1::Resp> done) {                                \
    Name##Async(std::make_shared<const v1::Req>(Make(args)), opts, std::move(done));       \
  }

CONV1D_CLIENT_TYPED_METHOD(Forward, ForwardArgs, MakeForwardRequest, ForwardRequest,
                           ForwardResponse)
CONV1D_CLIENT_TYPED_METHOD(Backward, BackwardArgs, MakeBackwardRequest, BackwardRequest,
                           BackwardResponse)
CONV1D_CLIENT_TYPED_METHOD(Update, UpdateArgs, MakeUpdateRequest, UpdateRequest,
                           UpdateResponse)
#undef CONV1D_CLIENT_TYPED_METHOD

absl::StatusOr<v1::ListWeightsResponse> Conv1dClient::ListWeights(const CallOptions& opts) {
  return CallSync<v1::ListWeightsRequest, v1::ListWeightsResponse>(
      v1::ListWeightsRequest(), opts,
      [](Channel& ch, grpc::ClientContext* ctx, const v1::ListWeightsRequest& r,
         v1::ListWeightsResponse* out) { return ch.stub->ListWeights(ctx, r, out); });
}

void Conv1dClient::ListWeightsAsync(const CallOptions& opts,
                                    Callback<v1::ListWeightsResponse> done) {
  StartAsync<v1::ListWeightsRequest, v1::ListWeightsResponse>(
      std::make_shared<v1::ListWeightsRequest>(), opts,
      [](Channel& ch, grpc::ClientContext* ctx, const v1::ListWeightsRequest* r,
         v1::ListWeightsResponse* out, std::function<void(grpc::Status)> cb) {
        ch.stub->async()->ListWeights(ctx, r, out, std::move(cb));
      },
      std::move(done));
}

absl::StatusOr<v1::ServerInfoResponse> Conv1dClient::ServerInfo(const CallOptions& opts) {
  return CallSync<v1::ServerInfoRequest, v1::ServerInfoResponse>(
      v1::ServerInfoRequest(), opts,
      [](Channel& ch, grpc::ClientContext* ctx, const v1::ServerInfoRequest& r,
         v1::ServerInfoResponse* out) { return ch.stub->ServerInfo(ctx, r, out); });
}

void Conv1dClient::ServerInfoAsync(const CallOptions& opts,
                                   Callback<v1::ServerInfoResponse> done) {
  StartAsync<v1::ServerInfoRequest, v1::ServerInfoResponse>(
      std::make_shared<v1::ServerInfoRequest>(), opts,
      [](Channel& ch, grpc::ClientContext* ctx, const v1::ServerInfoRequest* r,
         v1::ServerInfoResponse* out, std::function<void(grpc::Status)> cb) {
        ch.stub->async()->ServerInfo(ctx, r, out, std::move(cb));
      },
      std::move(done));
}

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

absl::StatusOr<HealthStatus> Conv1dClient::Health(const std::string& service,
                                                  const CallOptions& opts) {
  HealthCheckRequest req;
  req.set_service(service);
  absl::StatusOr<HealthCheckResponse> resp = CallSync<HealthCheckRequest, HealthCheckResponse>(
      req, opts,
      [](Channel& ch, grpc::ClientContext* ctx, const HealthCheckRequest& r,
         HealthCheckResponse* out) { return ch.health->Check(ctx, r, out); });
  if (!resp.ok()) return resp.status();
  return static_cast<HealthStatus>(resp->status());
}

void Conv1dClient::HealthAsync(const std::string& service, const CallOptions& opts,
                               Callback<HealthStatus> done) {
  auto req = std::make_shared<HealthCheckRequest>();
  req->set_service(service);
  StartAsync<HealthCheckRequest, HealthCheckResponse>(
      std::move(req), opts,
      [](Channel& ch, grpc::ClientContext* ctx, const HealthCheckRequest* r,
         HealthCheckResponse* out, std::function<void(grpc::Status)> cb) {
        ch.health->async()->Check(ctx, r, out, std::move(cb));
      },
      [done = std::move(done)](absl::StatusOr<HealthCheckResponse> r) mutable {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(static_cast<HealthStatus>(r->status()));
        }
      });
}

}  // namespace conv1d
