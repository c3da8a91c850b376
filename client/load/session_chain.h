// The decode chains of conv1d_load's session workloads (session_load.h).
//
// A ChainRunner keeps one chain slot busy for a level: it runs chains back
// to back, each a sequence of steps, through a Decode stream (`session`: x
// only on the wire) or through one Forward per step that carries the state
// (`unary-decode-fwd`). Every step's answer is checked by the chain's
// DecodeChainCheck. Both modes are driven by gRPC callbacks (a stream
// reactor, or the client's async Forward), so a level of thousands of chains
// needs no thread per chain and the generator's own cost per step stays
// small next to the server's.
//
// Thread-safety: a runner's callbacks run on gRPC's callback threads, one
// at a time per runner (each step waits for the previous answer). Level is
// shared by all runners of a level and guarded by its mutex; the XPool and
// the weights are read-only while runners exist.
#ifndef CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_
#define CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/conv1d_client.h"
#include "client/host_tensor.h"
#include "client/load/decode_chain_check.h"
#include "client/load/session_load.h"
#include "client/workload.h"

namespace conv1d {

// The name under which the session workloads register their weights.
inline constexpr char kSessionWeightsName[] = "conv1d_load_sessions";

// Random step inputs for every step length 1..max_tokens, shared by the
// chains of a level: as host tensors (for the checks) and as messages.
class XPool {
 public:
  XPool(const WorkloadSpec& spec, int64_t max_tokens, uint64_t seed);
  const HostTensor& tensor(int64_t tokens, uint64_t i) const { return tensors_[Index(tokens, i)]; }
  const v1::Tensor& proto(int64_t tokens, uint64_t i) const { return protos_[Index(tokens, i)]; }

 private:
  static constexpr int kPerLength = 8;
  static size_t Index(int64_t tokens, uint64_t i) {
    return static_cast<size_t>((tokens - 1) * kPerLength + i % kPerLength);
  }
  std::vector<HostTensor> tensors_;
  std::vector<v1::Tensor> protos_;
};

// What the runners of one level share.
struct Level {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  int64_t wrong ABSL_GUARDED_BY(mu) = 0;
  int64_t chains ABSL_GUARDED_BY(mu) = 0;
  int running ABSL_GUARDED_BY(mu) = 0;  // runners not yet finished
  std::string first_error ABSL_GUARDED_BY(mu);

  // A measured step: its latency, or its failure.
  void Record(const absl::Status& status, double us, bool wrong_answer);
};

class ChainRunner {
 public:
  ChainRunner(const SessionLoadOptions& options, const WeightSet& weights, const XPool& xs,
              Conv1dClient* client, bool session, uint64_t seed, Level* level);
  ~ChainRunner();

  // Starts the first chain; the runner then goes on by itself until the
  // level stops, and then decrements level->running (under its mutex).
  void Start();

  // Internal to the .cc (the stream reactor and the unary calls).
  struct Stream;
  void StepDone(absl::StatusOr<HostTensor> y, const HostTensor* final_states);
  void ChainEnded(const absl::Status& status);

 private:
  void BeginChain();
  void NextStep();
  void SendUnary();
  void Finish();

  const SessionLoadOptions& o_;
  const WeightSet& w_;
  const XPool& xs_;
  Conv1dClient* const client_;
  const bool session_;
  Level* const level_;
  DecodeChainCheck check_;
  FastRng rng_;
  // The chain in progress.
  int64_t chain_len_ = 0, done_steps_ = 0;
  int64_t tokens_ = 0;
  uint64_t pick_ = 0;
  absl::Time sent_;
  Stream* stream_ = nullptr;  // session mode: owned by gRPC until OnDone
  bool failed_ = false;
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_SESSION_CHAIN_H_
