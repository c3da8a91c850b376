#include "server/frontend/session_calls.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/segment_check.h"
#include "server/core/task.h"
#include "server/frontend/decode_stream.h"

namespace conv1d {
namespace {

// Sizes *t as an output of `dtype` and `shape`; returns its view.
OutputView BindWireOutput(DType dtype, const Shape& shape, v1::Tensor* t) {
  OutputView out;
  out.dtype = dtype;
  out.shape = shape;
  out.bytes = NumElements(shape) * DTypeSize(dtype);
  t->set_dtype(ToWireDType(dtype));
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  std::string* data = t->mutable_data();
  data->resize(static_cast<size_t>(out.bytes));
  out.data = data->data();
  return out;
}

}  // namespace

SessionCalls::SessionCalls(SessionManager* manager, Scheduler* scheduler,
                           WeightRegistry* registry, const ValidationLimits& limits,
                           const BackendLimits& backend_limits,
                           std::atomic<uint64_t>* task_ids)
    : manager_(manager),
      scheduler_(scheduler),
      registry_(registry),
      limits_(limits),
      backend_limits_(backend_limits),
      task_ids_(task_ids) {}

void SessionCalls::Open(const v1::OpenSessionRequest& request, absl::string_view prefix,
                        bool attached, const Principal& principal,
                        v1::OpenSessionResponse* response, absl::Time deadline,
                        std::function<bool()> cancelled, std::shared_ptr<Session>* opened,
                        Done done) {
  ValidatedOpen valid;
  absl::Status status = ValidateOpenSession(request, *registry_, limits_, prefix, &valid);
  if (!status.ok()) return done(status);
  if (request.weights_case() == v1::OpenSessionRequest::kWeightsName) {
    // The registered set: validation keeps it as the spec's weights_owner.
    auto set = std::static_pointer_cast<const WeightSet>(valid.spec.weights_owner);
    status = MayUseWeights(principal, *set);
    if (!status.ok()) {
      return done(absl::PermissionDeniedError(absl::StrCat(prefix, status.message())));
    }
  }
  valid.spec.owner = principal.name;
  absl::StatusOr<std::shared_ptr<Session>> session = manager_->Open(
      std::move(valid.spec), valid.conv_state.present() ? valid.conv_state.data : nullptr,
      attached);
  if (!session.ok()) return done(session.status());
  *opened = *session;
  const SessionSpec& spec = (*session)->spec();
  response->set_session_id((*session)->id());
  response->set_state_len(spec.state_len);
  response->set_dim(spec.key.dim);
  response->set_width(spec.key.width);
  if (!valid.prefill.present()) return done(absl::OkStatus());
  // The prefill is the session's first step; a failed prefill closes it.
  Step(*session, request.prefill(), true, absl::StrCat(prefix, "prefill"), nullptr,
       response->mutable_y(), deadline, std::move(cancelled),
       [manager = manager_, s = *session, done = std::move(done)](
           const absl::Status& st) mutable {
         if (!st.ok()) manager->Close(*s).IgnoreError();
         done(st);
       });
}

void SessionCalls::Step(std::shared_ptr<Session> session, const v1::Tensor& x, bool has_x,
                        absl::string_view field, const DetachedTensors* detached,
                        v1::Tensor* y, absl::Time deadline, std::function<bool()> cancelled,
                        Done done) {
  TensorView xv;
  absl::Status status =
      ValidateSessionX(x, has_x, field, session->spec(), limits_, detached, &xv);
  if (!status.ok()) return done(status);
  const OutputView yv = BindWireOutput(session->spec().key.x_dtype, xv.shape, y);
  auto task = std::make_unique<Task>();
  status = manager_->BeginStep(*session, xv, yv, &task->key, &task->segment);
  if (!status.ok()) return done(status);
  status = CheckServable(backend_limits_, task->key, task->segment);
  if (!status.ok()) {
    manager_->EndStep(*session, status, /*reached_backend=*/false);
    return done(status);
  }
  task->id = task_ids_->fetch_add(1, std::memory_order_relaxed);
  task->deadline = deadline;
  task->cancelled = std::move(cancelled);
  task->session_step = true;
  task->keepalive = session;
  task->on_done = [manager = manager_, s = session, done = std::move(done)](
                      const absl::Status& st, const TaskTimings& timings) mutable {
    manager->EndStep(*s, st, timings.reached_backend);
    done(st);
  };
  // On failure the task (with its on_done) is still ours and is not run.
  status = scheduler_->Submit(&task);
  if (!status.ok()) task->on_done(status, TaskTimings());
}

absl::Status SessionCalls::Export(Session& session, v1::Tensor* conv_state) {
  const SessionSpec& spec = session.spec();
  const OutputView out = BindWireOutput(
      spec.key.x_dtype, Shape{spec.batch, spec.key.dim, spec.state_len}, conv_state);
  absl::Status status = manager_->Export(session, out.data);
  if (!status.ok()) conv_state->Clear();
  return status;
}

void SessionCalls::AddStream(const std::shared_ptr<DecodeStream>& stream) {
  absl::MutexLock lock(&mu_);
  streams_.emplace(stream.get(), stream);
}

void SessionCalls::RemoveStream(DecodeStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

bool SessionCalls::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int SessionCalls::DrainStreams() {
  std::vector<std::shared_ptr<DecodeStream>> live;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (const auto& [raw, weak] : streams_) {
      if (std::shared_ptr<DecodeStream> stream = weak.lock()) live.push_back(std::move(stream));
    }
  }
  // Outside the lock: a stream may finish, and remove itself, meanwhile.
  for (const std::shared_ptr<DecodeStream>& stream : live) stream->Drain();
  return static_cast<int>(live.size());
}

}  // namespace conv1d
