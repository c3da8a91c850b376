#include "server/frontend/oip_sequences.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/frontend/oip_params.h"
#include "server/frontend/ownership.h"
#include "server/frontend/session_validation.h"

namespace conv1d {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

absl::Status NotOpen(const OipSequenceParams& seq, absl::string_view why) {
  return absl::NotFoundError(StrCat(
      "sequence_id ", seq.display, " is not open", why.empty() ? "" : ": ", why,
      " (a sequence starts with sequence_start, and ends with sequence_end, after "
      "--session_idle_timeout_s idle, or when a step fails on the server)"));
}

// Copies a translated input's bytes (wherever they arrived) into `to`, so
// that the session validation reads them from the message.
void CopyTensor(const v1::Tensor& from, const DetachedTensors& detached, v1::Tensor* to) {
  to->set_dtype(from.dtype());
  to->mutable_shape()->CopyFrom(from.shape());
  if (const DetachedTensors::Entry* e = detached.Find(&from)) {
    to->set_data(static_cast<const char*>(e->buffer.get()), static_cast<size_t>(e->bytes));
  } else {
    to->set_data(from.data());
  }
}

// Session validation names OpenSessionRequest fields; here they are
// parameters and inputs.
absl::Status InSequenceTerms(const absl::Status& s) {
  if (s.ok()) return s;
  const absl::Status oip = InOipTerms(s);
  return absl::Status(
      oip.code(), absl::StrReplaceAll(oip.message(),
                                      {{"state_len is", "parameter 'state_len' is"},
                                       {"max_draft_tokens is",
                                        "parameter 'max_draft_tokens' is"},
                                       {"accepted: ", "parameter 'accepted_tokens': "},
                                       {"batch is", "input 'x': B is"}}));
}

}  // namespace

// One request of a sequence, from arrival to its answer.
struct OipSequences::Work {
  Request in;
  std::shared_ptr<OipInferCall> call;
  OipSequenceParams seq;
  std::string key;           // table key
  std::string weights_name;  // as ApplyParameters read it
  Done done;
};

// One open sequence; every field but `session` (set once, before any step)
// is guarded by the owner's mu_.
struct OipSequences::Sequence {
  std::shared_ptr<Session> session;  // null while opening
  std::string weights_name;          // the start's; empty for inline weights
  v1::Activation activation = v1::ACTIVATION_NONE;
  v1::Layout layout = v1::LAYOUT_CHANNEL_FIRST;
  bool busy = false;   // a request is running; later ones queue
  bool ended = false;  // removed from the table; queued requests fail
  std::deque<std::shared_ptr<Work>> pending;
};

OipSequences::OipSequences(SessionManager* manager, RequestSubmitter* submitter,
                           const WeightRegistry* registry,
                           const SharedMemoryRegistry* shm)
    : manager_(manager), submitter_(submitter), registry_(registry), shm_(shm) {}

OipSequences::~OipSequences() = default;

int64_t OipSequences::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(table_.size());
}

void OipSequences::Infer(Request in, std::shared_ptr<OipInferCall>* call_out, Done done) {
  auto work = std::make_shared<Work>();
  work->in = std::move(in);
  work->call = std::make_shared<OipInferCall>();
  work->done = std::move(done);
  *call_out = work->call;
  const inference::ModelInferRequest& request = *work->in.request;
  OipInferCall* call = work->call.get();
  auto fail = [&work](const absl::Status& s) { work->done(s, 0, TaskTimings()); };
  call->model = FindOipModel(request.model_name());
  if (call->model == nullptr) {
    return fail(absl::NotFoundError(StrCat("model '", request.model_name(),
                                           "' is not served (models: conv1d_forward, "
                                           "conv1d_backward, conv1d_update)")));
  }
  absl::Status s = ParseSequenceParams(request, call->model->op, &work->seq);
  if (!s.ok()) return fail(s);
  if (manager_ == nullptr) {
    return fail(absl::UnimplementedError(
        "sequences are decode sessions, which this server's backend does not serve"));
  }
  s = ApplyParameters(request, Op::kUpdate, &call->forward, &call->backward, &call->update,
                      &work->weights_name);
  if (!s.ok()) return fail(s);
  work->key = StrCat(work->in.principal.name, "\n", work->seq.key);
  if (work->seq.start) return Start(work);
  Continue(work);
}

void OipSequences::Start(const std::shared_ptr<Work>& work) {
  const inference::ModelInferRequest& request = *work->in.request;
  OipInferCall* call = work->call.get();
  auto fail = [&work](const absl::Status& s) {
    work->call->leases.clear();
    work->done(s, 0, TaskTimings());
  };
  absl::Status s = TranslateOipSequenceInputs(request, work->in.raw_in, shm_,
                                              RegionUserOf(work->in.principal),
                                              work->weights_name,
                                              OipInputRule::kSequenceStart, call);
  if (!s.ok()) return fail(s);
  const v1::UpdateRequest& u = call->update;
  v1::OpenSessionRequest open;
  open.set_dtype(u.x().dtype());
  open.set_layout(u.layout());
  open.set_activation(u.activation());
  open.set_batch(u.x().shape_size() > 0 ? u.x().shape(0) : 0);
  if (!u.weights_name().empty()) {
    open.set_weights_name(u.weights_name());
  } else {
    CopyTensor(u.inline_weights().weight(), call->inputs,
               open.mutable_inline_weights()->mutable_weight());
    if (u.inline_weights().has_bias()) {
      CopyTensor(u.inline_weights().bias(), call->inputs,
                 open.mutable_inline_weights()->mutable_bias());
    }
  }
  if (u.has_conv_state()) CopyTensor(u.conv_state(), call->inputs, open.mutable_conv_state());
  if (work->seq.state_len >= 0) {
    open.set_state_len(work->seq.state_len);
  } else if (u.has_conv_state() && u.conv_state().shape_size() == 3) {
    open.set_state_len(u.conv_state().shape(2));
  }
  if (work->seq.max_draft_tokens >= 0) {
    open.set_max_draft_tokens(static_cast<int32_t>(work->seq.max_draft_tokens));
  }
  ValidatedOpen valid;
  s = InSequenceTerms(
      ValidateOpenSession(open, *registry_, submitter_->limits(), "", &valid));
  if (!s.ok()) return fail(s);
  if (!u.weights_name().empty()) {
    auto set = std::static_pointer_cast<const WeightSet>(valid.spec.weights_owner);
    if (s = MayUseWeights(work->in.principal, *set); !s.ok()) return fail(s);
  }
  valid.spec.owner = work->in.principal.name;
  auto seq = std::make_shared<Sequence>();
  seq->weights_name = u.weights_name();
  seq->activation = u.activation();
  seq->layout = u.layout();
  seq->busy = true;
  {
    absl::MutexLock lock(&mu_);
    auto it = table_.find(work->key);
    if (it != table_.end() && LiveLocked(*it->second)) {
      return fail(absl::AlreadyExistsError(
          StrCat("sequence_id ", work->seq.display,
                 " is already open; end it (sequence_end) before starting it again, or "
                 "use another id")));
    }
    if (it != table_.end()) it->second->ended = true;
    table_[work->key] = seq;
    SweepLocked();
  }
  absl::StatusOr<std::shared_ptr<Session>> session = manager_->Open(
      std::move(valid.spec), valid.conv_state.present() ? valid.conv_state.data : nullptr,
      /*attached=*/false);
  if (!session.ok()) {
    Finish(seq, work, InSequenceTerms(session.status()), 0, TaskTimings());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    seq->session = *std::move(session);
  }
  Pump(seq, work);
}

void OipSequences::Continue(const std::shared_ptr<Work>& work) {
  std::shared_ptr<Sequence> seq;
  {
    absl::MutexLock lock(&mu_);
    auto it = table_.find(work->key);
    if (it != table_.end()) seq = it->second;
    if (seq != nullptr && seq->busy) {
      seq->pending.push_back(work);
      return;
    }
    if (seq != nullptr) seq->busy = true;
  }
  if (seq == nullptr) {
    work->done(NotOpen(work->seq, ""), 0, TaskTimings());
    return;
  }
  Pump(seq, work);
}

void OipSequences::Pump(const std::shared_ptr<Sequence>& seq, std::shared_ptr<Work> work) {
  while (work != nullptr) {
    if (StartStep(seq, work)) return;
    work = Next(seq);
  }
}

std::shared_ptr<OipSequences::Work> OipSequences::Next(const std::shared_ptr<Sequence>& seq) {
  absl::MutexLock lock(&mu_);
  if (seq->pending.empty()) {
    seq->busy = false;
    return nullptr;
  }
  std::shared_ptr<Work> next = std::move(seq->pending.front());
  seq->pending.pop_front();
  return next;
}

absl::Status OipSequences::CheckRepeated(const Sequence& seq, const Work& work) const {
  const OipParams& params = work.in.request->parameters();
  const v1::UpdateRequest& u = work.call->update;
  const SessionSpec& spec = seq.session->spec();
  auto differs = [&](absl::string_view name) {
    return InvalidArgumentError(StrCat("parameter '", name, "' differs from the value "
                                       "sequence_id ", work.seq.display,
                                       " started with; a sequence's settings are fixed at "
                                       "its start"));
  };
  if (params.contains(kParamActivation) && u.activation() != seq.activation) {
    return differs(kParamActivation);
  }
  if (params.contains(kParamLayout) && u.layout() != seq.layout) return differs(kParamLayout);
  if (params.contains(kParamWeightsName) && work.weights_name != seq.weights_name) {
    return differs(kParamWeightsName);
  }
  if (work.seq.state_len >= 0 && work.seq.state_len != spec.state_len) {
    return differs(kParamStateLen);
  }
  if (work.seq.max_draft_tokens >= 0 && work.seq.max_draft_tokens != spec.max_draft_tokens) {
    return differs(kParamMaxDraftTokens);
  }
  return absl::OkStatus();
}

bool OipSequences::StartStep(const std::shared_ptr<Sequence>& seq,
                             const std::shared_ptr<Work>& work) {
  const inference::ModelInferRequest& request = *work->in.request;
  OipInferCall* call = work->call.get();
  const std::shared_ptr<Session>& session = seq->session;
  const SessionSpec& spec = session->spec();
  absl::Status s;
  if (!work->seq.start) {
    s = TranslateOipSequenceInputs(request, work->in.raw_in, shm_,
                                   RegionUserOf(work->in.principal), work->weights_name,
                                   OipInputRule::kSequenceStep, call);
    if (s.ok()) s = CheckRepeated(*seq, *work);
  }
  if (s.ok() && work->seq.accepted_tokens >= 0) {
    s = InSequenceTerms(manager_->Commit(*session, work->seq.accepted_tokens));
  }
  TensorView x;
  if (s.ok()) {
    s = InOipTerms(ValidateSessionX(call->update.x(), call->update.has_x(), "x", spec,
                                    submitter_->limits(), &call->inputs, &x));
  }
  if (s.ok()) {
    call->valid.key = spec.key;
    OutputView& y = call->valid.segment.output(Role::kY);
    y.dtype = spec.key.x_dtype;
    y.shape = x.shape;
    y.bytes = x.bytes;
    for (const auto& out : request.outputs()) {
      if (out.name() != RoleName(Role::kConvStateOut)) continue;
      // The state after the step, exported from the session.
      OutputView& state = call->valid.segment.output(Role::kConvStateOut);
      state.dtype = spec.key.x_dtype;
      state.shape = {spec.batch, spec.key.dim, spec.state_len};
      state.bytes = spec.state_bytes();
    }
    s = PrepareOipSequenceOutputs(request, shm_, RegionUserOf(work->in.principal), call);
  }
  auto task = std::make_unique<Task>();
  if (s.ok()) {
    BindOipOutputs(request, call, work->in.response, nullptr);
    s = manager_->BeginStep(*session, x, call->valid.segment.output(Role::kY), &task->key,
                            &task->segment);
  }
  if (absl::IsNotFound(s) && !work->seq.start) s = NotOpen(work->seq, s.message());
  if (!s.ok()) {
    Finish(seq, work, s, 0, TaskTimings());
    return false;
  }
  const int64_t batch = spec.batch;
  task->deadline = work->in.deadline;
  task->cancelled = work->in.cancelled;
  task->session_step = true;
  task->keepalive = work;
  task->on_done = [this, seq, work, batch](const absl::Status& st,
                                           const TaskTimings& timings) {
    manager_->EndStep(*seq->session, st, timings.reached_backend);
    absl::Status status = st;
    const OutputView& state = work->call->valid.segment.output(Role::kConvStateOut);
    if (status.ok() && state.bytes > 0) status = manager_->Export(*seq->session, state.data);
    Finish(seq, work, status, batch, timings);
    Pump(seq, Next(seq));
  };
  s = submitter_->SubmitTask(&task);
  if (!s.ok()) {
    manager_->EndStep(*session, s, /*reached_backend=*/false);
    Finish(seq, work, s, 0, TaskTimings());
    return false;
  }
  return true;
}

void OipSequences::Finish(const std::shared_ptr<Sequence>& seq,
                          const std::shared_ptr<Work>& work, const absl::Status& status,
                          int64_t batch, const TaskTimings& timings) {
  work->call->leases.clear();
  // An end, a failed start (open or first step), or a failed step that
  // closed the session removes the sequence; requests queued behind it fail.
  const bool close = work->seq.end || (work->seq.start && !status.ok());
  bool end = close || seq->session == nullptr;
  if (close && seq->session != nullptr) manager_->Close(*seq->session).IgnoreError();
  std::deque<std::shared_ptr<Work>> orphans;
  {
    absl::MutexLock lock(&mu_);
    if (!end && !status.ok()) end = !LiveLocked(*seq);
    if (end) {
      auto it = table_.find(work->key);
      if (it != table_.end() && it->second == seq) table_.erase(it);
      seq->ended = true;
      orphans.swap(seq->pending);
    }
  }
  work->done(status, batch, timings);
  for (const std::shared_ptr<Work>& w : orphans) {
    w->done(NotOpen(w->seq, work->seq.end && status.ok() ? "an earlier request ended it"
                                                         : "an earlier request of it failed"),
            0, TaskTimings());
  }
}

bool OipSequences::LiveLocked(const Sequence& seq) const {
  if (seq.ended) return false;
  if (seq.session == nullptr) return true;  // opening
  return manager_->Find(seq.session->id()).ok();
}

void OipSequences::SweepLocked() {
  // Sequences whose session expired stay in the table until used again;
  // past a margin over the open sessions, drop the idle ones that ended.
  if (static_cast<int64_t>(table_.size()) <= 2 * manager_->open_sessions() + 64) return;
  std::vector<std::string> gone;
  for (const auto& [key, seq] : table_) {
    if (!seq->busy && !LiveLocked(*seq)) gone.push_back(key);
  }
  for (const std::string& key : gone) table_.erase(key);
}

}  // namespace conv1d
