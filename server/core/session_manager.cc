#include "server/core/session_manager.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/os_random.h"

namespace conv1d {
namespace {

constexpr int64_t kMaxIdleTimeoutS = 31'536'000;
// The reaper looks at least this often, so a session expires at most this
// late (and never early).
constexpr absl::Duration kMaxReapInterval = absl::Seconds(1);

absl::Status Ended(const Session& s, SessionState state) {
  return absl::NotFoundError(absl::StrCat("session_id \"", s.id(), "\" is ",
                                          SessionStateName(state)));
}

// "s" and 128 random bits as 32 lowercase hex digits, from `source`
// (SessionManagerOptions::random_bytes; empty: FillOsRandom).
absl::StatusOr<std::string> NewSessionId(
    const std::function<absl::Status(absl::Span<uint8_t>)>& source) {
  std::array<uint8_t, 16> bits;
  const absl::Status s = source ? source(absl::MakeSpan(bits)) : FillOsRandom(absl::MakeSpan(bits));
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot make a session id: ", s.message()));
  }
  std::string id = "s";
  id.reserve(1 + 2 * bits.size());
  for (uint8_t b : bits) absl::StrAppendFormat(&id, "%02x", b);
  return id;
}

}  // namespace

absl::Status SessionNotFound(absl::string_view session_id) {
  return absl::NotFoundError(absl::StrCat(
      "session_id \"", session_id, "\" is not an open session (unknown, closed or expired)"));
}

const char* SessionStateName(SessionState s) {
  switch (s) {
    case SessionState::kOpen: return "open";
    case SessionState::kStepping: return "stepping";
    case SessionState::kCommitting: return "committing";
    case SessionState::kExporting: return "exporting";
    case SessionState::kExpired: return "expired";
    case SessionState::kClosed: return "closed";
  }
  return "unknown";
}

int64_t SessionSpec::slot_bytes_needed() const {
  return row_count() * history_len() * DTypeSize(key.x_dtype);
}

int64_t SessionSpec::state_bytes() const {
  return row_count() * state_len * DTypeSize(key.x_dtype);
}

absl::StatusOr<std::unique_ptr<SessionManager>> SessionManager::Create(
    const SessionManagerOptions& options, StateSlots* slots, Clock* clock,
    Observer* observer) {
  if (options.idle_timeout_s < 0 || options.idle_timeout_s > kMaxIdleTimeoutS) {
    return absl::InvalidArgumentError(absl::StrCat("session_idle_timeout_s: ",
                                                   options.idle_timeout_s,
                                                   " is outside 0..", kMaxIdleTimeoutS));
  }
  if (slots == nullptr || clock == nullptr) {
    return absl::InvalidArgumentError("SessionManager needs state slots and a clock");
  }
  return std::unique_ptr<SessionManager>(
      new SessionManager(options, slots, clock, observer));
}

SessionManager::SessionManager(const SessionManagerOptions& options, StateSlots* slots,
                               Clock* clock, Observer* observer)
    : options_(options),
      idle_timeout_(absl::Seconds(options.idle_timeout_s)),
      slots_(slots),
      clock_(clock),
      observer_(observer) {
  absl::MutexLock lock(&mu_);
  free_slots_.reserve(slots->num_slots());
  // Lowest slot first: a lightly used pool touches few pages.
  for (int32_t i = slots->num_slots() - 1; i >= 0; --i) free_slots_.push_back(i);
  if (options.idle_timeout_s > 0) reaper_ = std::thread([this] { ReapLoop(); });
}

SessionManager::~SessionManager() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
}

void SessionManager::ReapLoop() {
  const absl::Duration interval = std::min(kMaxReapInterval, idle_timeout_ / 4);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&stop_), clock_->Now() + interval);
    if (stop_) break;
    mu_.Unlock();
    ExpireIdle();
    mu_.Lock();
  }
}

absl::StatusOr<std::string> SessionManager::UnusedIdLocked(
    absl::StatusOr<std::string> drawn) const {
  // Two draws agree with odds of 2^-128; a repeat is drawn again all the same.
  while (drawn.ok() && sessions_.contains(*drawn)) drawn = NewSessionId(options_.random_bytes);
  return drawn;
}

absl::StatusOr<int32_t> SessionManager::TakeSlotLocked() {
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no free session state slot: all ", slots_->num_slots(),
        " slots (max_sessions) hold open sessions; close or export one, or retry later"));
  }
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slot_bytes_in_use_ += slots_->slot_bytes();
  return slot;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Open(SessionSpec spec,
                                                              const void* initial_state,
                                                              bool attached) {
  if (spec.batch < 1 || spec.key.dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch: ", spec.batch, " must be >= 1"));
  }
  const int64_t min_k = std::max<int64_t>(spec.key.width - 1, 1);
  if (spec.state_len < min_k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state_len: ", spec.state_len, " is less than max(W-1, 1) = ", min_k));
  }
  if (spec.max_draft_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_draft_tokens: ", spec.max_draft_tokens, " is negative"));
  }
  const int64_t need = spec.slot_bytes_needed();
  if (need > slots_->slot_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state_len + max_draft_tokens: a state of [B=", spec.batch, ", D=", spec.key.dim,
        ", state_len + max_draft_tokens = ", spec.history_len(), "] ",
        DTypeName(spec.key.x_dtype), " needs ", need,
        " bytes, more than the server's session_state_bytes of ", slots_->slot_bytes()));
  }
  spec.key.op = Op::kUpdate;
  int32_t slot = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<int32_t> taken = TakeSlotLocked();
    if (!taken.ok()) return taken.status();
    slot = *taken;
  }
  // The slot is ours alone until the session is in the table.
  const int64_t elem = DTypeSize(spec.key.x_dtype);
  const int64_t rows = spec.row_count();
  const int64_t k = spec.state_len;
  const int64_t h = spec.history_len();
  absl::Status status = slots_->Write(slot, 0, nullptr, rows * h * elem);
  if (status.ok() && initial_state != nullptr) {
    if (h == k) {
      status = slots_->Write(slot, 0, initial_state, rows * k * elem);
    } else {
      const char* src = static_cast<const char*>(initial_state);
      for (int64_t r = 0; r < rows && status.ok(); ++r) {
        status = slots_->Write(slot, (r * h + (h - k)) * elem, src + r * k * elem, k * elem);
      }
    }
  }
  absl::StatusOr<std::string> drawn = NewSessionId(options_.random_bytes);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> id = UnusedIdLocked(std::move(drawn));
  if (status.ok()) status = id.status();
  if (!status.ok()) {
    free_slots_.push_back(slot);
    slot_bytes_in_use_ -= slots_->slot_bytes();
    return status;
  }
  auto session = std::shared_ptr<Session>(new Session(*id, std::move(spec), slot));
  session->attached_ = attached;
  session->last_used_ = clock_->Now();
  sessions_.emplace(*id, session);
  if (observer_ != nullptr) {
    observer_->OnSessionEvent(SessionEvent::kOpened, static_cast<int64_t>(sessions_.size()),
                              slot_bytes_in_use_);
  }
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Find(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return SessionNotFound(id);
  return it->second;
}

absl::Status SessionManager::Attach(Session& session) {
  absl::MutexLock lock(&mu_);
  if (session.state_ == SessionState::kClosed || session.state_ == SessionState::kExpired) {
    return Ended(session, session.state_);
  }
  if (session.attached_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session_id \"", session.id(), "\" already belongs to a Decode stream"));
  }
  session.attached_ = true;
  session.last_used_ = clock_->Now();
  return absl::OkStatus();
}

absl::Status SessionManager::EnterLocked(Session& session, SessionState busy,
                                         const char* op) {
  switch (session.state_) {
    case SessionState::kOpen:
      if (session.close_pending_) return Ended(session, SessionState::kClosed);
      session.state_ = busy;
      session.last_used_ = clock_->Now();
      return absl::OkStatus();
    case SessionState::kExpired:
    case SessionState::kClosed:
      return Ended(session, session.state_);
    default:
      return absl::FailedPreconditionError(absl::StrCat(
          op, ": session_id \"", session.id(), "\" is ", SessionStateName(session.state_),
          "; one operation at a time"));
  }
}

void SessionManager::EndLocked(Session& session, SessionState end) {
  session.state_ = end;
  free_slots_.push_back(session.slot_);
  // The table may hold the last reference to `session`: erase it last.
  auto it = sessions_.find(session.id());
  std::shared_ptr<Session> keep;
  if (it != sessions_.end()) {
    keep = std::move(it->second);
    sessions_.erase(it);
  }
  slot_bytes_in_use_ -= slots_->slot_bytes();
  if (observer_ != nullptr) {
    observer_->OnSessionEvent(end == SessionState::kExpired ? SessionEvent::kExpired
                                                            : SessionEvent::kClosed,
                              static_cast<int64_t>(sessions_.size()), slot_bytes_in_use_);
  }
}

absl::Status SessionManager::BeginStep(Session& session, const TensorView& x,
                                       const OutputView& y, BatchKey* key,
                                       ConvSegment* segment) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = EnterLocked(session, SessionState::kStepping, "step"); !s.ok()) {
      return s;
    }
    session.step_start_ = clock_->Now();
    session.step_tokens_ = x.shape[session.spec_.key.layout == Layout::kChannelFirst ? 2 : 1];
  }
  const SessionSpec& spec = session.spec_;
  *key = spec.key;
  ConvSegment& seg = *segment;
  // Copied from an empty segment rather than moved from a temporary, whose
  // unused inline shape storage GCC takes for uninitialized bytes.
  static const ConvSegment kEmpty;
  seg = kEmpty;
  seg.batch = spec.batch;
  seg.seqlen = x.shape[spec.key.layout == Layout::kChannelFirst ? 2 : 1];
  seg.state_len = spec.history_len();
  seg.x = x;
  seg.y = y;
  seg.weight = spec.weight;
  seg.bias = spec.bias;
  const Shape state_shape{spec.batch, spec.key.dim, spec.history_len()};
  const int64_t bytes = spec.slot_bytes_needed();
  seg.conv_state.dtype = spec.key.x_dtype;
  seg.conv_state.shape = state_shape;
  seg.conv_state.data = slots_->SlotData(session.slot_);
  seg.conv_state.bytes = bytes;
  seg.conv_state.where = slots_->SlotPlacement(session.slot_);
  seg.conv_state_out.dtype = spec.key.x_dtype;
  seg.conv_state_out.shape = state_shape;
  seg.conv_state_out.data = slots_->SlotData(session.slot_);
  seg.conv_state_out.bytes = bytes;
  seg.conv_state_out.where = seg.conv_state.where;
  // A slot in device memory binds the step to its device's lanes.
  key->device = seg.conv_state.where.on_device() ? seg.conv_state.where.device : -1;
  return absl::OkStatus();
}

void SessionManager::EndStep(Session& session, const absl::Status& status,
                             bool reached_backend) {
  absl::MutexLock lock(&mu_);
  if (session.state_ != SessionState::kStepping) return;
  const absl::Time now = clock_->Now();
  session.state_ = SessionState::kOpen;
  session.last_used_ = now;
  if (status.ok()) {
    session.last_step_tokens_ = session.step_tokens_;
    if (observer_ != nullptr) observer_->OnSessionStep(now - session.step_start_);
  }
  if (!status.ok() && reached_backend) {
    if (observer_ != nullptr) {
      observer_->OnSessionEvent(SessionEvent::kFailed,
                                static_cast<int64_t>(sessions_.size()), slot_bytes_in_use_);
    }
    EndLocked(session, SessionState::kClosed);
    return;
  }
  if (session.close_pending_) EndLocked(session, SessionState::kClosed);
}

absl::Status SessionManager::Commit(Session& session, int64_t accepted) {
  const SessionSpec& spec = session.spec_;
  int64_t steps = 0;
  {
    absl::MutexLock lock(&mu_);
    steps = session.last_step_tokens_;
    if (session.state_ == SessionState::kOpen && !session.close_pending_ && steps == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "commit: session_id \"", session.id(),
          "\" has no uncommitted step (commit follows a step, once)"));
    }
    if (session.state_ == SessionState::kOpen && !session.close_pending_) {
      if (accepted < 0 || accepted > steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "accepted: ", accepted, " is outside 0..", steps, " (S of the last step)"));
      }
      if (steps - accepted > spec.max_draft_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            "accepted: ", accepted, " rejects ", steps - accepted,
            " tokens, more than the session's max_draft_tokens of ",
            spec.max_draft_tokens));
      }
    }
    if (absl::Status s = EnterLocked(session, SessionState::kCommitting, "commit"); !s.ok()) {
      return s;
    }
  }
  const absl::Status status =
      slots_->ShiftRight(session.slot_, spec.row_count(), spec.history_len(),
                         DTypeSize(spec.key.x_dtype), steps - accepted);
  absl::MutexLock lock(&mu_);
  session.state_ = SessionState::kOpen;
  session.last_step_tokens_ = 0;
  session.last_used_ = clock_->Now();
  if (!status.ok()) {
    EndLocked(session, SessionState::kClosed);
    return status;
  }
  if (session.close_pending_) EndLocked(session, SessionState::kClosed);
  return absl::OkStatus();
}

absl::Status SessionManager::Export(Session& session, void* dst) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = EnterLocked(session, SessionState::kExporting, "export"); !s.ok()) {
      return s;
    }
  }
  const SessionSpec& spec = session.spec_;
  const int64_t elem = DTypeSize(spec.key.x_dtype);
  const int64_t rows = spec.row_count();
  const int64_t k = spec.state_len;
  const int64_t h = spec.history_len();
  absl::Status status;
  if (h == k) {
    status = slots_->Read(session.slot_, 0, dst, rows * k * elem);
  } else {
    std::vector<char> history(static_cast<size_t>(rows * h * elem));
    status = slots_->Read(session.slot_, 0, history.data(), rows * h * elem);
    char* out = static_cast<char*>(dst);
    for (int64_t r = 0; status.ok() && r < rows; ++r) {
      std::copy_n(history.data() + (r * h + h - k) * elem, k * elem, out + r * k * elem);
    }
  }
  absl::MutexLock lock(&mu_);
  session.state_ = SessionState::kOpen;
  session.last_used_ = clock_->Now();
  if (session.close_pending_) EndLocked(session, SessionState::kClosed);
  return status;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Fork(Session& session) {
  int32_t slot = 0;
  int64_t last_step = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = EnterLocked(session, SessionState::kExporting, "fork"); !s.ok()) {
      return s;
    }
    absl::StatusOr<int32_t> taken = TakeSlotLocked();
    if (!taken.ok()) {
      session.state_ = SessionState::kOpen;
      if (session.close_pending_) EndLocked(session, SessionState::kClosed);
      return taken.status();
    }
    slot = *taken;
    last_step = session.last_step_tokens_;
  }
  absl::Status status = slots_->Copy(session.slot_, slot, session.spec_.slot_bytes_needed());
  absl::StatusOr<std::string> drawn = NewSessionId(options_.random_bytes);
  absl::MutexLock lock(&mu_);
  session.state_ = SessionState::kOpen;
  session.last_used_ = clock_->Now();
  if (session.close_pending_) EndLocked(session, SessionState::kClosed);
  absl::StatusOr<std::string> id = UnusedIdLocked(std::move(drawn));
  if (status.ok()) status = id.status();
  if (!status.ok()) {
    free_slots_.push_back(slot);
    slot_bytes_in_use_ -= slots_->slot_bytes();
    return status;
  }
  auto fork = std::shared_ptr<Session>(new Session(*id, session.spec_, slot));
  fork->last_step_tokens_ = last_step;
  fork->last_used_ = clock_->Now();
  sessions_.emplace(*id, fork);
  if (observer_ != nullptr) {
    observer_->OnSessionEvent(SessionEvent::kOpened, static_cast<int64_t>(sessions_.size()),
                              slot_bytes_in_use_);
  }
  return fork;
}

absl::Status SessionManager::Close(Session& session) {
  absl::MutexLock lock(&mu_);
  switch (session.state_) {
    case SessionState::kOpen:
      if (session.close_pending_) return Ended(session, SessionState::kClosed);
      EndLocked(session, SessionState::kClosed);
      return absl::OkStatus();
    case SessionState::kExpired:
    case SessionState::kClosed:
      return Ended(session, session.state_);
    default:
      if (session.close_pending_) return Ended(session, SessionState::kClosed);
      session.close_pending_ = true;
      return absl::OkStatus();
  }
}

int SessionManager::ExpireIdle() {
  if (idle_timeout_ <= absl::ZeroDuration()) return 0;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<std::shared_ptr<Session>> idle;
  for (const auto& [id, s] : sessions_) {
    if (s->state_ == SessionState::kOpen && !s->attached_ && !s->close_pending_ &&
        now - s->last_used_ >= idle_timeout_) {
      idle.push_back(s);
    }
  }
  for (const std::shared_ptr<Session>& s : idle) EndLocked(*s, SessionState::kExpired);
  return static_cast<int>(idle.size());
}

int64_t SessionManager::open_sessions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sessions_.size());
}

int32_t SessionManager::free_slots() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(free_slots_.size());
}

}  // namespace conv1d
