#include "client/load/session_load.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/load/session_chain.h"
#include "client/load/stats.h"
#include "client/verify.h"

namespace conv1d {

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
  if (!(o.verify_step_fraction >= 0 && o.verify_step_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--verify_step_fraction: ",
                                                   o.verify_step_fraction, " is outside 0..1"));
  }
  const WeightSet weights = MakeWeights(o.spec, o.seed);
  if (o.spec.registered_weights) {
    v1::RegisterWeightsRequest reg;
    reg.set_name(kSessionWeightsName);
    reg.set_replace(true);
    weights.weight.ToProto(reg.mutable_weight());
    if (!weights.bias.empty()) weights.bias.ToProto(reg.mutable_bias());
    if (absl::StatusOr<v1::RegisterWeightsResponse> r = client->RegisterWeights(reg); !r.ok()) {
      return r.status();
    }
  }
  std::vector<SessionLoadRow> rows;
  std::printf("%-18s %5s %12s %10s %10s %8s %6s %6s %8s %8s\n", "mode", "c", "steps/s",
              "p50_us", "p99_us", "steps", "errors", "wrong", "chains", "checked");
  for (int c : o.concurrency) {
    for (const std::string& mode : o.modes) {
      Level level;
      const XPool xs(o.spec, o.spec.seqlen, o.seed * 1000003);
      std::vector<std::unique_ptr<ChainRunner>> runners;
      for (int i = 0; i < c; ++i) {
        runners.push_back(std::make_unique<ChainRunner>(o, weights, xs, client, mode == "session",
                                                        o.seed * 7919 + i, &level));
      }
      for (auto& r : runners) r->Start();
      absl::SleepFor(absl::Seconds(o.warmup_s));
      level.measuring = true;
      const absl::Time start = absl::Now();
      absl::SleepFor(absl::Seconds(o.duration_s));
      level.measuring = false;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      level.stop = true;
      {
        absl::MutexLock lock(&level.mu);
        level.mu.Await(absl::Condition(
            +[](int* running) { return *running == 0; }, &level.running));
      }
      ChainStats all;
      for (const auto& r : runners) all.Add(r->stats());
      runners.clear();
      SessionLoadRow row;
      row.mode = mode;
      row.concurrency = c;
      row.steps = static_cast<int64_t>(all.latencies_us.size());
      const LatencySummary lat = Summarize(all.latencies_us);
      row.steps_per_s = row.steps / seconds;
      row.p50_us = lat.p50_us;
      row.p99_us = lat.p99_us;
      row.errors = all.errors;
      row.wrong = all.wrong;
      row.chains = all.chains;
      row.checked = all.checked;
      {
        absl::MutexLock lock(&level.mu);
        row.first_error = level.first_error;
      }
      std::printf("%-18s %5d %12.0f %10.1f %10.1f %8lld %6lld %6lld %8lld %8lld\n", mode.c_str(),
                  c, row.steps_per_s, row.p50_us, row.p99_us, static_cast<long long>(row.steps),
                  static_cast<long long>(row.errors), static_cast<long long>(row.wrong),
                  static_cast<long long>(row.chains), static_cast<long long>(row.checked));
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  if (o.spec.registered_weights) {
    v1::UnregisterWeightsRequest un;
    un.set_name(kSessionWeightsName);
    client->UnregisterWeights(un).IgnoreError();
  }
  return rows;
}

std::string SessionLoadCsv(const std::vector<SessionLoadRow>& rows) {
  std::string out =
      "mode,concurrency,steps_per_s,p50_us,p99_us,steps,errors,wrong,chains,checked\n";
  for (const SessionLoadRow& r : rows) {
    absl::StrAppend(&out, r.mode, ",", r.concurrency, ",", absl::StrFormat("%.1f", r.steps_per_s),
                    ",", absl::StrFormat("%.1f", r.p50_us), ",",
                    absl::StrFormat("%.1f", r.p99_us), ",", r.steps, ",", r.errors, ",",
                    r.wrong, ",", r.chains, ",", r.checked, "\n");
  }
  return out;
}

}  // namespace conv1d
