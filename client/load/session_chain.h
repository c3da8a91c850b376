// The decode chains of conv1d_load's session workloads (session_load.h).
//
// A ChainRunner keeps one chain slot busy for a level: it runs chains back
// to back, each a sequence of steps, through a Decode stream (`session`: x
// only on the wire) or through one Forward per step that carries the state
// (`unary-decode-fwd`). Every step advances the chain's DecodeChainCheck;
// the answers of all steps, or of a seeded random sample of them
// (SessionLoadOptions::verify_step_fraction), are checked by it. Step
// requests are shared, read-only messages of the XPool (gRPC serialises them
// as they are), and answers are checked where they lie in the response.
// Both modes are driven by gRPC callbacks (a stream reactor, or the client's
// async Forward), so a level of thousands of chains needs no thread per
// chain and the generator's own cost per step stays small next to the
// server's.
//
// Thread-safety: a runner's callbacks run on gRPC's callback threads, one
// at a time per runner (each step waits for the previous answer), and count
// into the runner's own ChainStats. Level is shared by all runners of a
// level and guarded by its mutex (taken per chain slot start and end and per
// error, not per step); the XPool and the weights are read-only while
// runners exist.
#ifndef CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_
#define CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/conv1d_client.h"
#include "client/host_tensor.h"
#include "client/load/decode_chain_check.h"
#include "client/load/session_load.h"
#include "client/tensor_view.h"
#include "client/workload.h"

namespace conv1d {

// The name under which the session workloads register their weights.
inline constexpr char kSessionWeightsName[] = "conv1d_load_sessions";

// Random step inputs for every step length 1..max_tokens, shared by the
// chains of a level: as host tensors (for the checks) and as Decode step
// requests (sent as they are; their x also goes into unary Forwards).
class XPool {
 public:
  XPool(const WorkloadSpec& spec, int64_t max_tokens, uint64_t seed);
  const HostTensor& tensor(int64_t tokens, uint64_t i) const { return tensors_[Index(tokens, i)]; }
  const v1::DecodeRequest& step(int64_t tokens, uint64_t i) const {
    return steps_[Index(tokens, i)];
  }

 private:
  static constexpr int kPerLength = 8;
  static size_t Index(int64_t tokens, uint64_t i) {
    return static_cast<size_t>((tokens - 1) * kPerLength + i % kPerLength);
  }
  std::vector<HostTensor> tensors_;
  std::vector<v1::DecodeRequest> steps_;
};

// What one chain slot counted while the level was measured.
struct ChainStats {
  std::vector<double> latencies_us;  // of the steps answered right
  int64_t errors = 0;   // failed calls
  int64_t wrong = 0;    // steps answered wrong (or unreadably)
  int64_t chains = 0;   // chains run to their full length
  int64_t checked = 0;  // steps whose answer was compared (wrong included)

  void Add(const ChainStats& other);
};

// What the runners of one level share.
struct Level {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  int running ABSL_GUARDED_BY(mu) = 0;  // runners not yet finished
  std::string first_error ABSL_GUARDED_BY(mu);

  // Keeps the first error of the level.
  void NoteError(const absl::Status& status);
};

class ChainRunner {
 public:
  ChainRunner(const SessionLoadOptions& options, const WeightSet& weights, const XPool& xs,
              Conv1dClient* client, bool session, uint64_t seed, Level* level);
  ~ChainRunner();

  // Starts the first chain; the runner then goes on by itself until the
  // level stops, and then decrements level->running (under its mutex).
  void Start();

  // What this runner counted; read it only once level->running is 0 (seen
  // under the level's mutex), after which no callback touches it.
  const ChainStats& stats() const { return stats_; }

  // Internal to the .cc (the stream reactor and the unary calls).
  struct Stream;
  // `y` and `final_states` (unary mode; else null) are views of the answer,
  // read before this returns.
  void StepDone(absl::StatusOr<client::TensorView> y, const v1::Tensor* final_states);
  void ChainEnded(const absl::Status& status);

 private:
  void BeginChain();
  void NextStep();
  void SendUnary();
  void Finish();
  // A step (us: its latency) or a failed call, counted while measuring.
  void Record(const absl::Status& status, double us, bool wrong_answer, bool checked);

  const SessionLoadOptions& o_;
  const WeightSet& w_;
  const XPool& xs_;
  Conv1dClient* const client_;
  const bool session_;
  Level* const level_;
  DecodeChainCheck check_;
  FastRng rng_;
  FastRng sample_rng_;  // which answers are checked; apart from rng_, so the
                        // chains are the same whatever the fraction
  // The chain in progress.
  int64_t chain_len_ = 0, done_steps_ = 0;
  int64_t tokens_ = 0;
  uint64_t pick_ = 0;
  absl::Time sent_;
  Stream* stream_ = nullptr;  // session mode: owned by gRPC until OnDone
  bool failed_ = false;
  ChainStats stats_;  // this runner's own: no lock per step
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_
