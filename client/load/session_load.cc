#include "client/load/session_load.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/decode_session.h"
#include "client/load/stats.h"
#include "client/verify.h"

namespace conv1d {
namespace {

constexpr char kWeightsName[] = "conv1d_load_sessions";
constexpr int kXPool = 32;  // random step inputs per thread, reused in turn

// What the threads of one level share.
struct Level {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  int64_t wrong ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);
};

// One decode chain's client side: the weights, the local state and the
// local CPU step that predicts the server's.
class Chain {
 public:
  Chain(const SessionLoadOptions& o, const WeightSet& w, Conv1dClient* client, bool session,
        uint64_t seed)
      : o_(o), w_(w), client_(client), session_(session) {
    const WorkloadSpec& s = o.spec;
    const std::vector<int64_t> shape = s.channel_last
                                           ? std::vector<int64_t>{s.batch, s.seqlen, s.dim}
                                           : std::vector<int64_t>{s.batch, s.dim, s.seqlen};
    for (int i = 0; i < kXPool; ++i) xs_.push_back(HostTensor::Random(s.dtype, shape, seed + i));
  }

  // Runs steps until the level stops.
  void Run(Level* level) {
    int64_t step = 0;
    while (!level->stop.load()) {
      if (absl::Status s = Begin(); !s.ok()) {
        Record(level, s, 0, false);
        absl::SleepFor(absl::Milliseconds(10));
        continue;
      }
      for (int64_t n = 0; !level->stop.load() && (o_.chain_steps == 0 || n < o_.chain_steps);
           ++n, ++step) {
        const HostTensor& x = xs_[step % kXPool];
        const absl::Time t0 = absl::Now();
        absl::StatusOr<HostTensor> y = Step(x);
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        bool wrong = false;
        if (y.ok() && o_.verify) wrong = !Check(x, *y, level);
        if (y.ok() && !o_.verify) state_ = next_state_;
        Record(level, y.status(), us, wrong);
        if (!y.ok() || wrong) break;
      }
      End();
    }
  }

 private:
  const WorkloadSpec& spec() const { return o_.spec; }

  absl::Status Begin() {
    const WorkloadSpec& s = spec();
    state_ = HostTensor::FromFloats(
        s.dtype, {s.batch, s.dim, s.width - 1},
        std::vector<float>(static_cast<size_t>(s.batch * s.dim * (s.width - 1)), 0.f));
    if (!session_) return absl::OkStatus();
    v1::OpenSessionRequest open;
    if (s.registered_weights) {
      open.set_weights_name(kWeightsName);
    } else {
      w_.weight.ToProto(open.mutable_inline_weights()->mutable_weight());
      if (!w_.bias.empty()) w_.bias.ToProto(open.mutable_inline_weights()->mutable_bias());
    }
    open.set_dtype(ToWireDType(s.dtype));
    open.set_layout(s.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
    open.set_activation(s.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
    open.set_batch(s.batch);
    absl::StatusOr<std::unique_ptr<DecodeSession>> d =
        DecodeSession::Open(*client_, open, absl::InfiniteDuration());
    if (!d.ok()) return d.status();
    stream_ = *std::move(d);
    return absl::OkStatus();
  }

  void End() {
    if (stream_ != nullptr) stream_->Close().IgnoreError();
    stream_.reset();
  }

  absl::StatusOr<HostTensor> Step(const HostTensor& x) {
    if (session_) {
      absl::StatusOr<v1::Tensor> y = stream_->Step(x.ToProto());
      if (!y.ok()) return y.status();
      return HostTensor::FromProto(*y);
    }
    const WorkloadSpec& s = spec();
    v1::ForwardRequest req;
    x.ToProto(req.mutable_x());
    if (s.registered_weights) {
      req.set_weights_name(kWeightsName);
    } else {
      w_.weight.ToProto(req.mutable_inline_weights()->mutable_weight());
      if (!w_.bias.empty()) w_.bias.ToProto(req.mutable_inline_weights()->mutable_bias());
    }
    req.set_layout(s.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
    req.set_activation(s.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
    state_.ToProto(req.mutable_initial_states());
    req.set_return_final_states(true);
    CallOptions opts;
    opts.timeout = o_.timeout;
    absl::StatusOr<v1::ForwardResponse> r = client_->Forward(req, opts);
    if (!r.ok()) return r.status();
    absl::StatusOr<HostTensor> st = HostTensor::FromProto(r->final_states());
    if (!st.ok()) return st.status();
    next_state_ = *std::move(st);
    return HostTensor::FromProto(r->y());
  }

  // Runs the step locally from the chain's state and compares; advances the
  // local state.
  bool Check(const HostTensor& x, const HostTensor& y, Level* level) {
    const WorkloadSpec& s = spec();
    ReferenceProblem p;
    p.op = WorkloadOp::kUpdate;
    p.channel_last = s.channel_last;
    p.silu = s.silu;
    p.batch = s.batch;
    p.dim = s.dim;
    p.seqlen = s.seqlen;
    p.width = s.width;
    p.state_len = s.width - 1;
    p.x = x;
    p.weight = w_.weight;
    p.bias = w_.bias;
    p.conv_state = state_;
    absl::StatusOr<ReferenceOutputs> want = ComputeReference(p);
    absl::Status st = want.ok() ? CompareTensors("y", y, want->y) : want.status();
    if (st.ok()) {
      if (!session_) st = CompareTensors("final_states", next_state_, want->conv_state_out);
      state_ = want->conv_state_out;
    }
    if (st.ok()) return true;
    absl::MutexLock lock(&level->mu);
    if (level->first_error.empty()) level->first_error = st.ToString();
    return false;
  }

  void Record(Level* level, const absl::Status& status, double us, bool wrong) {
    if (!level->measuring.load()) return;
    absl::MutexLock lock(&level->mu);
    if (!status.ok()) {
      ++level->errors;
      if (level->first_error.empty()) level->first_error = status.ToString();
    } else if (wrong) {
      ++level->wrong;
    } else {
      level->latencies_us.push_back(us);
    }
  }

  const SessionLoadOptions& o_;
  const WeightSet& w_;
  Conv1dClient* const client_;
  const bool session_;
  std::vector<HostTensor> xs_;
  HostTensor state_, next_state_;
  std::unique_ptr<DecodeSession> stream_;
};

}  // namespace

absl::StatusOr<std::vector<SessionLoadRow>> RunSessionLoad(const SessionLoadOptions& o,
                                                           Conv1dClient* client) {
  for (const std::string& m : o.modes) {
    if (m != "session" && m != "unary-decode-fwd") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mode: '", m, "' is not session or unary-decode-fwd"));
    }
  }
  for (int c : o.concurrency) {
    if (c < 1 || c > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("--concurrency: ", c, " is outside 1..4096"));
    }
  }
  if (o.spec.seqlen < 1) return absl::InvalidArgumentError("--shape: S must be >= 1");
  if (o.spec.width < 2) {
    return absl::InvalidArgumentError("--width: session workloads need W >= 2");
  }
  if (o.verify && !ReferenceAvailable()) {
    return absl::FailedPreconditionError("step checks need the CPU reference (--verify_steps=false)");
  }
  const WeightSet weights = MakeWeights(o.spec, o.seed);
  if (o.spec.registered_weights) {
    v1::RegisterWeightsRequest reg;
    reg.set_name(kWeightsName);
    reg.set_replace(true);
    weights.weight.ToProto(reg.mutable_weight());
    if (!weights.bias.empty()) weights.bias.ToProto(reg.mutable_bias());
    if (absl::StatusOr<v1::RegisterWeightsResponse> r = client->RegisterWeights(reg); !r.ok()) {
      return r.status();
    }
  }
  std::vector<SessionLoadRow> rows;
  std::printf("%-18s %5s %12s %10s %10s %8s %6s %6s\n", "mode", "c", "steps/s", "p50_us",
              "p99_us", "steps", "errors", "wrong");
  for (int c : o.concurrency) {
    for (const std::string& mode : o.modes) {
      Level level;
      std::vector<std::unique_ptr<Chain>> chains;
      std::vector<std::thread> threads;
      for (int i = 0; i < c; ++i) {
        chains.push_back(std::make_unique<Chain>(o, weights, client, mode == "session",
                                                 o.seed * 1000003 + i * kXPool));
      }
      for (int i = 0; i < c; ++i) threads.emplace_back([&, i] { chains[i]->Run(&level); });
      absl::SleepFor(absl::Seconds(o.warmup_s));
      level.measuring = true;
      const absl::Time start = absl::Now();
      absl::SleepFor(absl::Seconds(o.duration_s));
      level.measuring = false;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      level.stop = true;
      for (std::thread& t : threads) t.join();
      SessionLoadRow row;
      row.mode = mode;
      row.concurrency = c;
      absl::MutexLock lock(&level.mu);
      row.steps = static_cast<int64_t>(level.latencies_us.size());
      const LatencySummary lat = Summarize(level.latencies_us);
      row.steps_per_s = row.steps / seconds;
      row.p50_us = lat.p50_us;
      row.p99_us = lat.p99_us;
      row.errors = level.errors;
      row.wrong = level.wrong;
      row.first_error = level.first_error;
      std::printf("%-18s %5d %12.0f %10.1f %10.1f %8lld %6lld %6lld\n", mode.c_str(), c,
                  row.steps_per_s, row.p50_us, row.p99_us, static_cast<long long>(row.steps),
                  static_cast<long long>(row.errors), static_cast<long long>(row.wrong));
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  if (o.spec.registered_weights) {
    v1::UnregisterWeightsRequest un;
    un.set_name(kWeightsName);
    client->UnregisterWeights(un).IgnoreError();
  }
  return rows;
}

std::string SessionLoadCsv(const std::vector<SessionLoadRow>& rows) {
  std::string out = "mode,concurrency,steps_per_s,p50_us,p99_us,steps,errors,wrong\n";
  for (const SessionLoadRow& r : rows) {
    absl::StrAppend(&out, r.mode, ",", r.concurrency, ",", absl::StrFormat("%.1f", r.steps_per_s),
                    ",", absl::StrFormat("%.1f", r.p50_us), ",",
                    absl::StrFormat("%.1f", r.p99_us), ",", r.steps, ",", r.errors, ",",
                    r.wrong, "\n");
  }
  return out;
}

}  // namespace conv1d
