// SessionManager: decode sessions (DESIGN §8). A session keeps a conv state
// in one state slot (state_slots.h) between requests, so that a decode step
// sends x only. Used by the gRPC frontend (Decode streams and the unary
// session RPCs); knows nothing of gRPC.
//
// Lifecycle of a session (SessionState): Open -> (Stepping | Committing |
// Exporting -> Open)* -> Closed or Expired. One operation at a time: an
// operation asked for while another runs is refused (FAILED_PRECONDITION),
// so the slot has one user at a time (the backend while stepping, this class
// otherwise).
//
// Steps are ordinary update tasks. BeginStep fills a task's BatchKey and
// ConvSegment with the session's weights and with conv_state and
// conv_state_out both pointing at the slot (its Placement: host memory on the
// CPU backend, kDeviceOwned device memory on a GPU backend), so the update
// advances the state in place; the caller submits the task to the
// scheduler, where steps of many sessions (and stateless updates) with one
// batch key fuse into one backend call. EndStep, from the task's on_done,
// returns the session to Open.
//
// Rollback (speculative decoding). A session opened with state length K and
// max_draft_tokens R keeps a slot of [B, D, H] with H = K + R columns,
// oldest first, and every step is an update with state length H: the slot
// always holds the last H inputs of the sequence (zeros before its start),
// of which the last K are the state proper (the update's y reads only the
// last W-1 <= K of them, so the extra columns do not change any result).
// commit(accepted) after a step of S tokens must make the slot what it
// would be had only the first `accepted` tokens been sent: the last H inputs
// up to token `accepted`. These are the slot's columns shifted right by
// r = S - accepted, and the r oldest columns are lost (zeroed). The state
// proper stays exact as long as r <= R: before the step at least K trailing
// columns were exact, after it at least min(K + S, H), and after the shift
// at least min(K + S, H) - r >= K. Hence the rule: 0 <= accepted <= S and
// S - accepted <= max_draft_tokens; only the last step can be committed,
// once; a new step implicitly accepts all of the previous one. The slot
// bytes a session needs are B * D * H * sizeof(dtype), at most the pool's
// slot_bytes.
//
// Ownership: a session records the principal that opened it
// (SessionSpec::owner; "" on a server that authenticates nobody), and a fork
// keeps its source's. The manager only stores it: the frontend decides who
// may use a session it finds (server/frontend/ownership.h).
//
// Ids: "s" and 32 lowercase hex digits, 128 bits from the operating
// system's secure generator (os_random.h), drawn afresh for every open and
// fork, so one id tells nothing of another. Open and Fork answer UNAVAILABLE
// rather than make an id when no random bytes can be had.
//
// Limits: a full pool refuses a new session with RESOURCE_EXHAUSTED and
// never evicts one. A session idle (no operation) for idle_timeout expires:
// its slot is freed and its id answers NOT_FOUND from then on. Sessions
// attached to a stream (Decode) do not expire; the stream's end closes them.
// A step whose task failed after it reached the backend leaves the state
// undefined, so the session is closed (the step's error goes to the client).
//
// Time comes from the injected Clock: a reaper thread expires idle sessions
// as the clock passes their deadlines (FakeClock in tests: no sleeps).
//
// Thread-safety: every method is thread-safe. One mutex guards the session
// table, the free slots and every session's state; slot copies run outside
// it (the session's state keeps others away).
#ifndef CONV1D_SERVER_CORE_SESSION_MANAGER_H_
#define CONV1D_SERVER_CORE_SESSION_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/core/clock.h"
#include "server/core/conv_problem.h"
#include "server/core/observer.h"
#include "server/core/state_slots.h"

namespace conv1d {

// Where a session is in its life.
enum class SessionState : uint8_t {
  // Holds a slot with a valid state and takes the next operation.
  kOpen = 0,
  // A step (or the opening prefill) is queued or computing: the slot belongs
  // to the backend until the step's task is done.
  kStepping = 1,
  // A commit is rolling the slot's history back (StateSlots::ShiftRight).
  kCommitting = 2,
  // The slot is being read: an export, or the source of a fork.
  kExporting = 3,
  // Idle longer than the idle timeout: slot freed, id answers NOT_FOUND.
  kExpired = 4,
  // Closed by its client, its stream's end, the server's drain or a failed
  // step: slot freed, id answers NOT_FOUND.
  kClosed = 5,
};
const char* SessionStateName(SessionState s);  // "open", "stepping", ...

// What a session computes, and whose it is; fixed at open.
struct SessionSpec {
  // An update key: x_dtype, weight_dtype, dim, width, activation, layout,
  // has_bias.
  BatchKey key;
  int64_t batch = 0;             // B >= 1
  int64_t state_len = 0;         // K >= max(W-1, 1)
  int32_t max_draft_tokens = 0;  // R >= 0
  // Views of the weights, valid while `weights_owner` lives.
  TensorView weight;
  TensorView bias;
  std::shared_ptr<const void> weights_owner;
  // The principal that opened the session; "" without authentication.
  std::string owner;

  int64_t history_len() const { return state_len + max_draft_tokens; }  // H
  int64_t row_count() const { return batch * key.dim; }
  int64_t slot_bytes_needed() const;  // B * D * H * sizeof(x_dtype)
  int64_t state_bytes() const;        // B * D * K * sizeof(x_dtype)
};

class SessionManager;

// NOT_FOUND naming `session_id`: what Find answers for an id that names no
// live session, and what the frontend answers for another principal's.
absl::Status SessionNotFound(absl::string_view session_id);

// A handle to one session; the manager keeps its mutable state. Handles stay
// valid after the session ends (operations then answer NOT_FOUND).
class Session {
 public:
  const std::string& id() const { return id_; }
  const SessionSpec& spec() const { return spec_; }
  int32_t slot() const { return slot_; }

 private:
  friend class SessionManager;
  Session(std::string id, SessionSpec spec, int32_t slot)
      : id_(std::move(id)), spec_(std::move(spec)), slot_(slot) {}

  const std::string id_;
  const SessionSpec spec_;
  const int32_t slot_;
  // Guarded by the manager's mutex.
  SessionState state_ = SessionState::kOpen;
  bool attached_ = false;         // owned by a Decode stream
  bool close_pending_ = false;    // Close arrived while busy
  int64_t last_step_tokens_ = 0;  // S of the last step; 0: nothing to commit
  absl::Time last_used_;
  absl::Time step_start_;
  int64_t step_tokens_ = 0;  // S of the step in flight
};

struct SessionManagerOptions {
  // A session with no operation for this long expires. 0: never.
  // Default 300 s; valid range 0..31'536'000 (a year); otherwise
  // INVALID_ARGUMENT.
  int64_t idle_timeout_s = 300;
  // Where the ids' random bits come from: empty (the default) for the
  // operating system's secure generator (FillOsRandom). Whatever it
  // returns when it fails, Open and Fork answer UNAVAILABLE; tests set a
  // failing source to check that.
  std::function<absl::Status(absl::Span<uint8_t>)> random_bytes;
};

class SessionManager {
 public:
  // `slots`, `clock` and `observer` (may be null) are not owned and must
  // outlive the manager. INVALID_ARGUMENT for bad options or null pointers.
  static absl::StatusOr<std::unique_ptr<SessionManager>> Create(
      const SessionManagerOptions& options, StateSlots* slots, Clock* clock,
      Observer* observer);
  ~SessionManager();  // stops the reaper; frees every slot

  // Opens a session: checks that its state fits a slot (INVALID_ARGUMENT
  // naming state_len / max_draft_tokens), takes a free slot
  // (RESOURCE_EXHAUSTED when none is free) and writes `initial_state`
  // ([B, D, K] bytes of the spec's dtype, oldest first) into it, or zeros
  // when null. `attached`: owned by a stream (never expires). UNAVAILABLE
  // when the operating system gives no random bytes for the id.
  absl::StatusOr<std::shared_ptr<Session>> Open(SessionSpec spec,
                                                const void* initial_state,
                                                bool attached);

  // The live session with this id; NOT_FOUND naming `session_id` otherwise.
  absl::StatusOr<std::shared_ptr<Session>> Find(absl::string_view id) const;

  // A stream takes over a detached session (FAILED_PRECONDITION when another
  // stream holds it).
  absl::Status Attach(Session& session);

  // Starts a step of the S = seqlen tokens in `x` (already validated against
  // the spec by the caller): Open -> Stepping, and fills *key and *segment
  // (x, y, weights, conv_state and conv_state_out on the slot). On OK the
  // caller must call EndStep exactly once (also when the task is never
  // submitted). NOT_FOUND for a session that ended, FAILED_PRECONDITION
  // while another operation runs.
  absl::Status BeginStep(Session& session, const TensorView& x, const OutputView& y,
                         BatchKey* key, ConvSegment* segment);
  // Ends a step: Stepping -> Open, the step committable. `status` is the
  // task's outcome and `reached_backend` whether its batch was computed: a
  // step that failed there closes the session (its state is undefined).
  void EndStep(Session& session, const absl::Status& status, bool reached_backend);

  // Keeps the first `accepted` tokens of the last step (see the header).
  // INVALID_ARGUMENT naming `accepted` when accepted < 0, accepted > S or
  // S - accepted > max_draft_tokens; FAILED_PRECONDITION when there is no
  // uncommitted step or another operation runs; NOT_FOUND when ended.
  absl::Status Commit(Session& session, int64_t accepted);

  // Copies the state [B, D, K] (oldest first) into `dst`
  // (spec().state_bytes() bytes).
  absl::Status Export(Session& session, void* dst);

  // A new session, detached, with a copy of the slot (and of the last step's
  // commit window). RESOURCE_EXHAUSTED when no slot is free; UNAVAILABLE as
  // for Open.
  absl::StatusOr<std::shared_ptr<Session>> Fork(Session& session);

  // Ends the session and frees its slot; while another operation runs
  // (a step in the scheduler), the slot is freed when that operation ends.
  // NOT_FOUND when it already ended.
  absl::Status Close(Session& session);

  // Expires every detached Open session idle for idle_timeout or longer;
  // returns how many. The reaper thread calls it; tests may too.
  int ExpireIdle();

  int64_t open_sessions() const;
  int32_t free_slots() const;
  StateSlots* slots() const { return slots_; }
  const SessionManagerOptions& options() const { return options_; }

 private:
  SessionManager(const SessionManagerOptions& options, StateSlots* slots, Clock* clock,
                 Observer* observer);
  // Moves `session` to an end state and frees its slot.
  void EndLocked(Session& session, SessionState end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Open -> `busy`; NOT_FOUND / FAILED_PRECONDITION otherwise.
  absl::Status EnterLocked(Session& session, SessionState busy, const char* op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int32_t> TakeSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `drawn` (a fresh id or the error of drawing one), or a fresh one while
  // it names a live session.
  absl::StatusOr<std::string> UnusedIdLocked(absl::StatusOr<std::string> drawn) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapLoop();

  const SessionManagerOptions options_;
  const absl::Duration idle_timeout_;
  StateSlots* const slots_;
  Clock* const clock_;
  Observer* const observer_;  // may be null

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  int64_t slot_bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_SESSION_MANAGER_H_
