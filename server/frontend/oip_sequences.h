// OipSequences: the Open Inference Protocol's sequences (Triton's
// sequence_id / sequence_start / sequence_end request parameters) served as
// decode sessions (session_manager.h) of model conv1d_update.
//
// A request with sequence_start opens a session: x's dtype and batch, the
// weights (inputs weight / bias or parameter weights_name), the activation
// and layout parameters, the state length (parameter state_len, else the
// last dim of input conv_state when sent, else max(W-1, 1)), the draft
// window (parameter max_draft_tokens, default 0) and the initial state
// (input conv_state, else zeros). Every request of the sequence, the first
// included, then steps the session with its x and returns y; the state
// stays on the server (a request that lists output conv_state_out gets the
// state after its step, exported from the session). sequence_end closes
// the session after the step, whether the step succeeded or not; so does a
// failed first request (no sequence is left open by a refused start).
// accepted_tokens = N on a request
// first commits the previous step's first N tokens (speculative rollback,
// SessionManager::Commit), then steps.
//
// Requests of one sequence run one at a time in arrival order: one that
// arrives while another of its sequence is in flight (a stream, or unary
// calls from several threads) waits in the sequence's queue. Steps of
// different sequences are ordinary session steps and fuse in the scheduler.
//
// Sequence ids are the client's: an int64 or a string (7 and "7" are two
// sequences), scoped by the principal that started them (another principal
// gets NOT_FOUND). Errors: NOT_FOUND naming the sequence_id for a sequence
// that is not open (never started, ended, expired after the session idle
// timeout, or closed by a failed step); ALREADY_EXISTS for sequence_start on
// an open id; INVALID_ARGUMENT naming the parameter or input otherwise
// (settings a later request repeats must equal the start's); the session
// pool's RESOURCE_EXHAUSTED when no slot is free.
//
// Used by OipService (ModelInfer and ModelStreamInfer). Thread-safety: every
// method is thread-safe; one mutex guards the sequence table and queues,
// and is never held while calling into the scheduler or a completion.
// Everything passed to the constructor must outlive this object.
#ifndef CONV1D_SERVER_FRONTEND_OIP_SEQUENCES_H_
#define CONV1D_SERVER_FRONTEND_OIP_SEQUENCES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/core/session_manager.h"
#include "server/core/shm_registry.h"
#include "server/core/task.h"
#include "server/core/weight_registry.h"
#include "server/frontend/auth.h"
#include "server/frontend/oip_request.h"
#include "server/frontend/request_submit.h"

namespace conv1d {

class OipSequences {
 public:
  // Runs exactly once with the request's outcome, the batch B of the step
  // (0 when it never reached the scheduler) and its timings.
  using Done = absl::AnyInvocable<void(const absl::Status&, int64_t batch,
                                       const TaskTimings&)>;

  // `manager` may be null (the backend serves no decode sessions: every
  // sequence request answers UNIMPLEMENTED).
  OipSequences(SessionManager* manager, RequestSubmitter* submitter,
               const WeightRegistry* registry, const SharedMemoryRegistry* shm);
  ~OipSequences();

  // One request with sequence parameters (HasSequenceParameters). The
  // request, response and `raw_in` (may be null) must stay valid until
  // `done` has run; `request_owner` keeps them alive meanwhile. *call is
  // the call's translation (for log lines).
  struct Request {
    const inference::ModelInferRequest* request = nullptr;
    inference::ModelInferResponse* response = nullptr;
    const RawBuffers* raw_in = nullptr;
    std::shared_ptr<const void> request_owner;
    Principal principal;
    absl::Time deadline = absl::InfiniteFuture();
    std::function<bool()> cancelled;
  };
  void Infer(Request request, std::shared_ptr<OipInferCall>* call, Done done);

  // Sequences in the table (open, or ended and not yet noticed).
  int64_t size() const;

 private:
  struct Work;
  struct Sequence;

  void Start(const std::shared_ptr<Work>& work);
  void Continue(const std::shared_ptr<Work>& work);
  // Runs `work` and the queued requests after it until one is in the
  // scheduler (its completion pumps on) or the queue is empty.
  void Pump(const std::shared_ptr<Sequence>& seq, std::shared_ptr<Work> work);
  // Starts one request's step; false when it finished at once.
  bool StartStep(const std::shared_ptr<Sequence>& seq, const std::shared_ptr<Work>& work);
  void Finish(const std::shared_ptr<Sequence>& seq, const std::shared_ptr<Work>& work,
              const absl::Status& status, int64_t batch, const TaskTimings& timings);
  // The next queued request, or null (the sequence is then idle).
  std::shared_ptr<Work> Next(const std::shared_ptr<Sequence>& seq);
  // Parameters of a later request that must repeat the start's settings.
  absl::Status CheckRepeated(const Sequence& seq, const Work& work) const;
  bool LiveLocked(const Sequence& seq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SessionManager* const manager_;
  RequestSubmitter* const submitter_;
  const WeightRegistry* const registry_;
  const SharedMemoryRegistry* const shm_;

  mutable absl::Mutex mu_;
  // principal name + '\n' + OipSequenceParams::key -> sequence.
  absl::flat_hash_map<std::string, std::shared_ptr<Sequence>> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_SEQUENCES_H_
