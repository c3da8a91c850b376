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
#include "client/load/decode_chain_check.h"
#include "client/load/stats.h"
#include "client/verify.h"

namespace conv1d {
namespace {

constexpr char kWeightsName[] = "conv1d_load_sessions";
constexpr int kXPool = 8;  // random step inputs per step length, reused in turn

// Random step inputs for every step length S of the level, shared
// (read-only) by its chains: as host tensors (for the checks) and as
// messages (sent as they are).
class XPool {
 public:
  XPool(const WorkloadSpec& s, int64_t max_tokens, uint64_t seed) {
    for (int64_t n = 1; n <= max_tokens; ++n) {
      const std::vector<int64_t> shape = s.channel_last ? std::vector<int64_t>{s.batch, n, s.dim}
                                                        : std::vector<int64_t>{s.batch, s.dim, n};
      for (int i = 0; i < kXPool; ++i) {
        HostTensor x = HostTensor::Random(s.dtype, shape, seed + n * kXPool + i);
        protos_.push_back(x.ToProto());
        tensors_.push_back(std::move(x));
      }
    }
  }
  // The i-th input of S tokens (S from 1 to max_tokens).
  const HostTensor& tensor(int64_t tokens, uint64_t i) const { return tensors_[Index(tokens, i)]; }
  const v1::Tensor& proto(int64_t tokens, uint64_t i) const { return protos_[Index(tokens, i)]; }

 private:
  static size_t Index(int64_t tokens, uint64_t i) {
    return static_cast<size_t>((tokens - 1) * kXPool + i % kXPool);
  }
  std::vector<HostTensor> tensors_;
  std::vector<v1::Tensor> protos_;
};

// What the threads of one level share.
struct Level {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  int64_t wrong ABSL_GUARDED_BY(mu) = 0;
  int64_t chains ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);
};

// One thread's decode chains, one after another: the weights, the local
// chain check that predicts the server's answers, and the session.
class Chain {
 public:
  Chain(const SessionLoadOptions& o, const WeightSet& w, const XPool& xs, Conv1dClient* client,
        bool session, uint64_t seed)
      : o_(o), w_(w), xs_(xs), client_(client), session_(session), check_(o.spec, w.weight, w.bias),
        rng_(seed) {}

  // Runs chains until the level stops.
  void Run(Level* level) {
    while (!level->stop.load()) {
      if (absl::Status s = Begin(); !s.ok()) {
        Record(level, s, 0, false);
        absl::SleepFor(absl::Milliseconds(10));
        continue;
      }
      const int64_t steps = Draw(o_.chain_steps_min, o_.chain_steps);
      int64_t n = 0;
      for (; !level->stop.load() && (steps == 0 || n < steps); ++n) {
        const int64_t tokens = Draw(o_.step_tokens_min, o_.spec.seqlen);
        const uint64_t pick = rng_.Next();
        const absl::Time t0 = absl::Now();
        absl::StatusOr<HostTensor> y = Step(tokens, pick);
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        bool wrong = false;
        if (y.ok() && (o_.verify || !session_)) wrong = !Check(xs_.tensor(tokens, pick), *y, level);
        Record(level, y.status(), us, wrong);
        if (!y.ok() || wrong) break;
      }
      End();
      if (steps > 0 && n == steps && level->measuring.load()) {
        absl::MutexLock lock(&level->mu);
        ++level->chains;
      }
    }
  }

 private:
  const WorkloadSpec& spec() const { return o_.spec; }

  // Uniform in lo..hi when lo > 0, else hi.
  int64_t Draw(int64_t lo, int64_t hi) {
    if (lo <= 0 || lo >= hi) return hi;
    return lo + static_cast<int64_t>(rng_.Next() % static_cast<uint64_t>(hi - lo + 1));
  }

  absl::Status Begin() {
    const WorkloadSpec& s = spec();
    check_.Reset();
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

  absl::StatusOr<HostTensor> Step(int64_t tokens, uint64_t pick) {
    if (session_) {
      absl::StatusOr<v1::Tensor> y = stream_->Step(xs_.proto(tokens, pick));
      if (!y.ok()) return y.status();
      return HostTensor::FromProto(*y);
    }
    const WorkloadSpec& s = spec();
    v1::ForwardRequest req;
    *req.mutable_x() = xs_.proto(tokens, pick);
    if (s.registered_weights) {
      req.set_weights_name(kWeightsName);
    } else {
      w_.weight.ToProto(req.mutable_inline_weights()->mutable_weight());
      if (!w_.bias.empty()) w_.bias.ToProto(req.mutable_inline_weights()->mutable_bias());
    }
    req.set_layout(s.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
    req.set_activation(s.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
    check_.State().ToProto(req.mutable_initial_states());
    req.set_return_final_states(true);
    CallOptions opts;
    opts.timeout = o_.timeout;
    absl::StatusOr<v1::ForwardResponse> r = client_->Forward(req, opts);
    if (!r.ok()) return r.status();
    absl::StatusOr<HostTensor> st = HostTensor::FromProto(r->final_states());
    if (!st.ok()) return st.status();
    final_states_ = *std::move(st);
    return HostTensor::FromProto(r->y());
  }

  // Checks y against the local chain, which then advances (also without
  // --verify_steps: the unary mode sends the state). Unary: final_states too.
  bool Check(const HostTensor& x, const HostTensor& y, Level* level) {
    absl::Status st = check_.Step(x, o_.verify ? &y : nullptr);
    if (st.ok() && o_.verify && !session_) {
      st = CompareTensors("final_states", final_states_, check_.State());
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
  const XPool& xs_;
  Conv1dClient* const client_;
  const bool session_;
  DecodeChainCheck check_;
  FastRng rng_;
  HostTensor final_states_;
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
  if (o.step_tokens_min < 0 || o.step_tokens_min > o.spec.seqlen) {
    return absl::InvalidArgumentError(absl::StrCat("--step_tokens_min: ", o.step_tokens_min,
                                                   " is outside 0..S (S = ", o.spec.seqlen,
                                                   " from --shape)"));
  }
  if (o.chain_steps < 0 || o.chain_steps_min < 0 ||
      (o.chain_steps_min > 0 && (o.chain_steps == 0 || o.chain_steps_min > o.chain_steps))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chain_steps_min: ", o.chain_steps_min, " needs 1 <= it <= --chain_steps (",
        o.chain_steps, ")"));
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
  std::printf("%-18s %5s %12s %10s %10s %8s %6s %6s %8s\n", "mode", "c", "steps/s", "p50_us",
              "p99_us", "steps", "errors", "wrong", "chains");
  for (int c : o.concurrency) {
    for (const std::string& mode : o.modes) {
      Level level;
      const XPool xs(o.spec, o.spec.seqlen, o.seed * 1000003);
      std::vector<std::unique_ptr<Chain>> chains;
      std::vector<std::thread> threads;
      for (int i = 0; i < c; ++i) {
        chains.push_back(std::make_unique<Chain>(o, weights, xs, client, mode == "session",
                                                 o.seed * 7919 + i));
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
      row.chains = level.chains;
      row.first_error = level.first_error;
      std::printf("%-18s %5d %12.0f %10.1f %10.1f %8lld %6lld %6lld %8lld\n", mode.c_str(), c,
                  row.steps_per_s, row.p50_us, row.p99_us, static_cast<long long>(row.steps),
                  static_cast<long long>(row.errors), static_cast<long long>(row.wrong),
                  static_cast<long long>(row.chains));
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
  std::string out = "mode,concurrency,steps_per_s,p50_us,p99_us,steps,errors,wrong,chains\n";
  for (const SessionLoadRow& r : rows) {
    absl::StrAppend(&out, r.mode, ",", r.concurrency, ",", absl::StrFormat("%.1f", r.steps_per_s),
                    ",", absl::StrFormat("%.1f", r.p50_us), ",",
                    absl::StrFormat("%.1f", r.p99_us), ",", r.steps, ",", r.errors, ",",
                    r.wrong, ",", r.chains, "\n");
  }
  return out;
}

}  // namespace conv1d
