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
      x.ToProto(steps_.emplace_back().mutable_step()->mutable_x());
      tensors_.push_back(std::move(x));
    }
  }
}

void ChainStats::Add(const ChainStats& o) {
  latencies_us.insert(latencies_us.end(), o.latencies_us.begin(), o.latencies_us.end());
  errors += o.errors;
  wrong += o.wrong;
  chains += o.chains;
  checked += o.checked;
}

void Level::NoteError(const absl::Status& status) {
  absl::MutexLock lock(&mu);
  if (first_error.empty()) first_error = status.ToString();
}

// One Decode call: opens the session, then one step per request. A step
// request is the XPool's (read-only, alive for the level), so nothing is
// copied and gRPC may still hold the previous one; a write (or the
// half-close) asked for while another is in flight waits for its
// OnWriteDone. Deletes itself in OnDone, after handing the call's outcome to
// the runner.
struct ChainRunner::Stream final
    : public grpc::ClientBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
  explicit Stream(ChainRunner* runner) : runner_(runner) {}

  // Starts the call with the open request. Separate from the constructor:
  // the answer may arrive before `new Stream` has returned.
  void Begin(Conv1dClient* client, const v1::OpenSessionRequest& open) {
    client->PrepareStreamContext(&ctx_, absl::InfiniteFuture());
    client->NextStub()->async()->Decode(&ctx_, this);
    *open_.mutable_open() = open;
    expect_ = v1::DecodeResponse::kOpen;
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
    }
    StartWrite(&open_);
    StartRead(&resp_);
    StartCall();
  }

  // Start* calls are made outside mu_: gRPC may run a reaction inline.
  void SendStep(const v1::DecodeRequest* step) {
    const v1::DecodeRequest* now = nullptr;
    {
      absl::MutexLock lock(&mu_);
      expect_ = v1::DecodeResponse::kStep;
      if (writing_) {
        pending_ = step;
      } else {
        writing_ = true;
        now = step;
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
    const v1::DecodeRequest* next = nullptr;
    bool half_close = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) return;  // the read fails too, and OnDone reports the status
      if (pending_ != nullptr) {
        next = pending_;
        pending_ = nullptr;
        writing_ = true;
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
    // Checked in place: resp_ is read into again only after StepDone.
    runner_->StepDone(client::TensorView::FromProto(resp_.step().y()), nullptr);
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
  v1::DecodeRequest open_;
  v1::DecodeResponse resp_;
  v1::DecodeResponse::KindCase expect_ = v1::DecodeResponse::KIND_NOT_SET;
  absl::Status error_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  const v1::DecodeRequest* pending_ ABSL_GUARDED_BY(mu_) = nullptr;  // the next write
  bool done_pending_ ABSL_GUARDED_BY(mu_) = false;
};

ChainRunner::ChainRunner(const SessionLoadOptions& o, const WeightSet& w, const XPool& xs,
                         Conv1dClient* client, bool session, uint64_t seed, Level* level)
    : o_(o), w_(w), xs_(xs), client_(client), session_(session), level_(level),
      check_(o.spec, w.weight, w.bias), rng_(seed), sample_rng_(seed ^ 0x5a3c96e1f00dULL) {}

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
    stream_->SendStep(&xs_.step(tokens_, pick_));
  } else {
    SendUnary();
  }
}

void ChainRunner::SendUnary() {
  const WorkloadSpec& s = o_.spec;
  auto req = std::make_shared<v1::ForwardRequest>();
  *req->mutable_x() = xs_.step(tokens_, pick_).step().x();
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
                          StepDone(client::TensorView::FromProto(r->y()), &r->final_states());
                        });
}

void ChainRunner::StepDone(absl::StatusOr<client::TensorView> y,
                           const v1::Tensor* final_states) {
  const double us = absl::ToDoubleMicroseconds(absl::Now() - sent_);
  // Every step advances the chain; a sample of them (all by default) is
  // checked, drawn on every step so the sample does not depend on timing.
  const bool check =
      o_.verify && (o_.verify_step_fraction >= 1.0 ||
                    sample_rng_.UniformDouble() < o_.verify_step_fraction);
  absl::Status st = y.status();
  if (st.ok()) st = check_.Step(xs_.tensor(tokens_, pick_).view(), check ? &*y : nullptr);
  if (st.ok() && check && final_states != nullptr) {
    absl::StatusOr<HostTensor> fs = HostTensor::FromProto(*final_states);
    st = fs.ok() ? CompareTensors("final_states", *fs, check_.State()) : fs.status();
  }
  if (!st.ok()) {
    // A wrong answer (or an unreadable one) ends the chain.
    failed_ = true;
    level_->NoteError(st);
    Record(absl::OkStatus(), us, /*wrong_answer=*/true, check);
  } else {
    Record(absl::OkStatus(), us, false, check);
    ++done_steps_;
  }
  NextStep();
}

void ChainRunner::ChainEnded(const absl::Status& status) {
  stream_ = nullptr;
  if (!status.ok() && !failed_) Record(status, 0, false, false);
  if (status.ok() && !failed_ && chain_len_ > 0 && done_steps_ == chain_len_ &&
      level_->measuring.load()) {
    ++stats_.chains;
  }
  // A failing server is not hammered: the next chain starts 10 ms later.
  if (!status.ok()) absl::SleepFor(absl::Milliseconds(10));
  BeginChain();
}

void ChainRunner::Record(const absl::Status& status, double us, bool wrong_answer,
                         bool checked) {
  if (!level_->measuring.load()) return;
  if (checked) ++stats_.checked;
  if (!status.ok()) {
    ++stats_.errors;
    level_->NoteError(status);
  } else if (wrong_answer) {
    ++stats_.wrong;
  } else {
    stats_.latencies_us.push_back(us);
  }
}

void ChainRunner::Finish() {
  absl::MutexLock lock(&level_->mu);
  --level_->running;
}

}  // namespace conv1d
