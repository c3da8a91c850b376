// Session workloads of conv1d_load: N concurrent decode chains, each a
// sequence of steps of S tokens, run either through decode sessions
// (`session`: a Decode stream per chain, x only on the wire) or through
// today's stateless path (`unary-decode-fwd`: a Forward per step carrying
// initial_states and asking for final_states, the client keeping the
// state). Every step advances a local chain (decode_chain_check.h), and
// every step's answer, or a seeded random sample of them, is checked against
// its float64 prediction of the same steps from the same state. Chains may
// draw their length, and every step its token count, at random. Reports,
// per mode and concurrency, steps/s, the per-step latency percentiles seen
// by the client and how many answers were checked.
//
// Used by client/load/main.cc and its tests. RunSessionLoad blocks while
// the chains run on gRPC's callback threads (session_chain.h).
#ifndef CONV1D_CLIENT_LOAD_SESSION_LOAD_H_
#define CONV1D_CLIENT_LOAD_SESSION_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/conv1d_client.h"
#include "client/workload.h"

namespace conv1d {

struct SessionLoadOptions {
  // dtype, weight dtype, B, D, W, activation, bias, layout; seqlen is S,
  // the tokens of one step; registered_weights: register once, by name.
  WorkloadSpec spec;
  // "session" or "unary-decode-fwd"; several are run one after another for
  // every concurrency level.
  std::vector<std::string> modes = {"session"};
  std::vector<int> concurrency = {1};
  double warmup_s = 1.0;
  double duration_s = 6.0;
  // Steps of a chain before it ends (its session closed) and a new chain
  // starts from zeros; 0: one chain per thread for the whole level. With
  // chain_steps_min > 0 each chain draws its length from
  // chain_steps_min..chain_steps.
  int64_t chain_steps = 0;
  int64_t chain_steps_min = 0;
  // > 0: each step draws its token count from step_tokens_min..S (S from
  // spec.seqlen); 0: every step has S tokens.
  int64_t step_tokens_min = 0;
  // Check answers against the local CPU chain.
  bool verify = true;
  // With verify: the fraction of steps whose answer is checked, drawn per
  // step from a seeded generator of each chain slot, in 0..1; 1 = every
  // step. Unchecked steps still advance the chain (a copy of their x), so
  // every checked step is checked from the exact state.
  double verify_step_fraction = 1.0;
  uint64_t seed = 1;
  absl::Duration timeout = absl::Seconds(30);
};

struct SessionLoadRow {
  std::string mode;
  int concurrency = 0;
  double steps_per_s = 0;
  double p50_us = 0, p99_us = 0;
  int64_t steps = 0;   // measured
  int64_t errors = 0;  // failed calls (the chain then restarts)
  int64_t wrong = 0;   // steps whose y or state differed from the local chain
  int64_t chains = 0;  // chains run to their full length while measuring
  int64_t checked = 0;  // measured steps whose answer was checked (wrong included)
  std::string first_error;
};

// Valid modes and levels (INVALID_ARGUMENT otherwise); one row per mode and
// level, printed to stdout as they finish.
absl::StatusOr<std::vector<SessionLoadRow>> RunSessionLoad(const SessionLoadOptions& options,
                                                           Conv1dClient* client);

// "mode,concurrency,steps_per_s,p50_us,p99_us,steps,errors,wrong,chains,checked"
// and rows.
std::string SessionLoadCsv(const std::vector<SessionLoadRow>& rows);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_SESSION_LOAD_H_
