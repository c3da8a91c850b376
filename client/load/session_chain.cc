#include "client/load/session_chain.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/verify.h"

namespace conv1d {

XPool::XPool(const WorkloadSpec& s, int64_t max_tokens, uint64_t seed) {
  for (int64_t n = 1; n <= max_tokens; ++n) {
    const std::vector<int64_t> shape = s.channel_last ? std::vector<int64_t>{s.batch, n, s.dim}
                                                      : std::vector<int64_t>{s.batch, s.dim, n};
    for (int i = 0; i < kPerLength; ++i) {
      HostTensor x = HostTensor::Random(s.dtype, shape, seed + n * kPerLength + i);
      protos_.push_back(x.ToProto());
      tensors_.push_back(std::move(x));
    }
  }
}

void Level::Record(const absl::Status& status, double us, bool wrong_answer) {
  if (!measuring.load()) return;
  absl::MutexLock lock(&mu);
  if (!status.ok()) {
    ++errors;
    if (first_error.empty()) first_error = status.ToString();
  } else if (wrong_answer) {
    ++wrong;
  } else {
    latencies_us.push_back(us);
  }
}

// One Decode call: opens the session, then one step per request. Requests
// alternate between two buffers, so the next can be filled while gRPC may
// still hold the previous one; a write (or the half-close) asked for while
// another is in flight waits for its OnWriteDone. Deletes itself in OnDone,
// after handing the call's outcome to the runner.
struct ChainRunner::Stream final
    : public grpc::ClientBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
  explicit Stream(ChainRunner* runner) : runner_(runner) {}

  // Starts the call with the open request. Separate from the constructor:
  // the answer may arrive before `new Stream` has returned.
  void Begin(Conv1dClient* client, const v1::OpenSessionRequest& open) {
    client->PrepareStreamContext(&ctx_, absl::InfiniteFuture());
    client->NextStub()->async()->Decode(&ctx_, this);
    *req_[0].mutable_open() = open;
    expect_ = v1::DecodeResponse::kOpen;
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
    }
    StartWrite(&req_[0]);
    StartRead(&resp_);
    StartCall();
  }

  // Start* calls are made outside mu_: gRPC may run a reaction inline.
  void SendStep(const v1::Tensor& x) {
    v1::DecodeRequest* now = nullptr;
    {
      absl::MutexLock lock(&mu_);
      cur_ ^= 1;
      *req_[cur_].mutable_step()->mutable_x() = x;
      expect_ = v1::DecodeResponse::kStep;
      if (writing_) {
        write_pending_ = true;
      } else {
        writing_ = true;
        now = &req_[cur_];
      }
    }
    StartRead(&resp_);
    if (now != nullptr) StartWrite(now);
  }

  // Half-closes: the server then closes the session and ends the call.
  void EndWrites() {
    {
      absl::MutexLock lock(&mu_);
      if (writing_) {
        done_pending_ = true;
        return;
      }
    }
    StartWritesDone();
  }

  void OnWriteDone(bool ok) override {
    v1::DecodeRequest* next = nullptr;
    bool half_close = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) return;  // the read fails too, and OnDone reports the status
      if (write_pending_) {
        write_pending_ = false;
        writing_ = true;
        next = &req_[cur_];
      } else if (done_pending_) {
        done_pending_ = false;
        half_close = true;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (half_close) StartWritesDone();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the call has ended; OnDone follows
    if (resp_.draining()) {
      // The server drains: the state follows, then UNAVAILABLE (an error of
      // this chain, reported by OnDone).
      StartRead(&resp_);
      return;
    }
    if (resp_.kind_case() != expect_) {
      error_ = absl::InternalError(absl::StrCat("the server answered kind ", resp_.kind_case(),
                                                ", expected ", expect_));
      ctx_.TryCancel();
      return;
    }
    if (expect_ == v1::DecodeResponse::kOpen) {
      runner_->NextStep();
      return;
    }
    runner_->StepDone(HostTensor::FromProto(resp_.step().y()), nullptr);
  }

  void OnDone(const grpc::Status& s) override {
    absl::Status st = error_;
    if (st.ok() && !s.ok()) {
      st = absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    }
    runner_->ChainEnded(st);
    delete this;
  }

 private:
  ChainRunner* const runner_;
  grpc::ClientContext ctx_;
  v1::DecodeRequest req_[2];
  v1::DecodeResponse resp_;
  v1::DecodeResponse::KindCase expect_ = v1::DecodeResponse::KIND_NOT_SET;
  absl::Status error_;
  absl::Mutex mu_;
  int cur_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool done_pending_ ABSL_GUARDED_BY(mu_) = false;
};

ChainRunner::ChainRunner(const SessionLoadOptions& o, const WeightSet& w, const XPool& xs,
                         Conv1dClient* client, bool session, uint64_t seed, Level* level)
    : o_(o), w_(w), xs_(xs), client_(client), session_(session), level_(level),
      check_(o.spec, w.weight, w.bias), rng_(seed) {}

ChainRunner::~ChainRunner() = default;

void ChainRunner::Start() {
  {
    absl::MutexLock lock(&level_->mu);
    ++level_->running;
  }
  BeginChain();
}

namespace {

// Uniform in lo..hi when 0 < lo < hi, else hi.
int64_t Draw(FastRng& rng, int64_t lo, int64_t hi) {
  if (lo <= 0 || lo >= hi) return hi;
  return lo + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

void ChainRunner::BeginChain() {
  if (level_->stop.load()) {
    Finish();
    return;
  }
  check_.Reset();
  chain_len_ = Draw(rng_, o_.chain_steps_min, o_.chain_steps);
  done_steps_ = 0;
  failed_ = false;
  if (!session_) {
    NextStep();
    return;
  }
  const WorkloadSpec& s = o_.spec;
  v1::OpenSessionRequest open;
  if (s.registered_weights) {
    open.set_weights_name(kSessionWeightsName);
  } else {
    w_.weight.ToProto(open.mutable_inline_weights()->mutable_weight());
    if (!w_.bias.empty()) w_.bias.ToProto(open.mutable_inline_weights()->mutable_bias());
  }
  open.set_dtype(ToWireDType(s.dtype));
  open.set_layout(s.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
  open.set_activation(s.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  open.set_batch(s.batch);
  stream_ = new Stream(this);
  stream_->Begin(client_, open);
}

void ChainRunner::NextStep() {
  if (level_->stop.load() || failed_ || (chain_len_ > 0 && done_steps_ == chain_len_)) {
    if (session_) {
      stream_->EndWrites();
    } else {
      ChainEnded(absl::OkStatus());
    }
    return;
  }
  tokens_ = Draw(rng_, o_.step_tokens_min, o_.spec.seqlen);
  pick_ = rng_.Next();
  sent_ = absl::Now();
  if (session_) {
    stream_->SendStep(xs_.proto(tokens_, pick_));
  } else {
    SendUnary();
  }
}

void ChainRunner::SendUnary() {
  const WorkloadSpec& s = o_.spec;
  auto req = std::make_shared<v1::ForwardRequest>();
  *req->mutable_x() = xs_.proto(tokens_, pick_);
  if (s.registered_weights) {
    req->set_weights_name(kSessionWeightsName);
  } else {
    w_.weight.ToProto(req->mutable_inline_weights()->mutable_weight());
    if (!w_.bias.empty()) w_.bias.ToProto(req->mutable_inline_weights()->mutable_bias());
  }
  req->set_layout(s.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
  req->set_activation(s.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  check_.State().ToProto(req->mutable_initial_states());
  req->set_return_final_states(true);
  CallOptions opts;
  opts.timeout = o_.timeout;
  client_->ForwardAsync(std::move(req), opts,
                        [this](absl::StatusOr<v1::ForwardResponse> r) {
                          if (!r.ok()) {
                            ChainEnded(r.status());
                            return;
                          }
                          absl::StatusOr<HostTensor> fs = HostTensor::FromProto(r->final_states());
                          if (!fs.ok()) {
                            ChainEnded(fs.status());
                            return;
                          }
                          StepDone(HostTensor::FromProto(r->y()), &*fs);
                        });
}

void ChainRunner::StepDone(absl::StatusOr<HostTensor> y, const HostTensor* final_states) {
  const double us = absl::ToDoubleMicroseconds(absl::Now() - sent_);
  absl::Status st = y.status();
  if (st.ok()) st = check_.Step(xs_.tensor(tokens_, pick_), o_.verify ? &*y : nullptr);
  if (st.ok() && o_.verify && final_states != nullptr) {
    st = CompareTensors("final_states", *final_states, check_.State());
  }
  if (!st.ok()) {
    // A wrong answer (or an unreadable one) ends the chain.
    failed_ = true;
    {
      absl::MutexLock lock(&level_->mu);
      if (level_->first_error.empty()) level_->first_error = st.ToString();
    }
    level_->Record(absl::OkStatus(), us, /*wrong_answer=*/true);
  } else {
    level_->Record(absl::OkStatus(), us, false);
    ++done_steps_;
  }
  NextStep();
}

void ChainRunner::ChainEnded(const absl::Status& status) {
  stream_ = nullptr;
  if (!status.ok() && !failed_) level_->Record(status, 0, false);
  if (status.ok() && !failed_ && chain_len_ > 0 && done_steps_ == chain_len_ &&
      level_->measuring.load()) {
    absl::MutexLock lock(&level_->mu);
    ++level_->chains;
  }
  // A failing server is not hammered: the next chain starts 10 ms later.
  if (!status.ok()) absl::SleepFor(absl::Milliseconds(10));
  BeginChain();
}

void ChainRunner::Finish() {
  absl::MutexLock lock(&level_->mu);
  --level_->running;
}

}  // namespace conv1d
