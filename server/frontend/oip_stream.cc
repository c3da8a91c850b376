// OipService::ModelStreamInfer: a bidirectional stream of ModelInferRequest
// in, ModelStreamInferResponse out (oip_service.h states the contract).
//
// Each request read is copied out of the read buffer into its own item and
// started through OipService::StartInfer; the next read starts as soon as
// that call returns (so requests reach it in stream order, which sequences
// need), and a client may have many requests of one stream in flight, which
// fuse with everything else queued. Answers are written one at a time in
// completion order from a queue. The stream finishes once the client has
// half-closed (or gone) and every started request has been answered; only
// then may gRPC call OnDone, so no completion ever touches a freed reactor.
#include <deque>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "server/frontend/oip_service.h"
#include "server/frontend/status_mapping.h"

namespace conv1d {

class OipService::Stream final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  Stream(OipService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = ShouldFinishLocked();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    auto item = std::make_shared<Item>();
    item->request.Swap(&request_);
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    item->info = service_->Begin("ModelStreamInfer", context_,
                                 static_cast<int64_t>(item->request.ByteSizeLong()));
    if (!item->info.auth.ok()) {
      Answer(item, item->info.auth);
    } else {
      inference::ModelInferResponse* response = item->answer.mutable_infer_response();
      service_->StartInfer(context_, &item->request, response, item->info.principal, nullptr,
                           nullptr, item, &item->call,
                           [this, item](const absl::Status& status) { Answer(item, status); });
    }
    // Only now the next read: its OnReadDone may run on another thread, and
    // a sequence's requests must reach StartInfer in stream order (a step
    // started before its sequence_start found no open sequence).
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    inference::ModelStreamInferResponse* next = nullptr;
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      --pending_;
      if (!queue_.empty()) {
        next = &queue_.front()->answer;
      } else {
        writing_ = false;
        finish = ShouldFinishLocked();
      }
    }
    // Outside the lock: after Finish, OnDone may delete this at any time.
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  struct Item {
    inference::ModelInferRequest request;
    inference::ModelStreamInferResponse answer;
    std::shared_ptr<OipInferCall> call;
    CallInfo info;
  };

  // From a lane thread (or inline when refused): queues the answer.
  void Answer(const std::shared_ptr<Item>& item, const absl::Status& status) {
    inference::ModelInferResponse* response = item->answer.mutable_infer_response();
    if (!status.ok()) {
      response->Clear();
      response->set_id(item->request.id());
      response->set_model_name(item->request.model_name());
      response->set_model_version(item->request.model_version());
      item->answer.set_error_message(ToGrpcStatus(status).error_message());
    }
    const int64_t sent = static_cast<int64_t>(item->answer.ByteSizeLong());
    service_->Report(context_, item->info, status, sent, TranslatedRequest(item->call.get()));
    inference::ModelStreamInferResponse* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(item);
      if (!writing_) {
        writing_ = true;
        write = &queue_.front()->answer;
      }
    }
    if (write != nullptr) StartWrite(write);
  }

  // True exactly once: when the client has half-closed and every started
  // request has been answered; the caller then finishes the stream.
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  OipService* const service_;
  grpc::CallbackServerContext* const context_;
  inference::ModelInferRequest request_;  // the read in progress

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Item>> queue_ ABSL_GUARDED_BY(mu_);  // front: writing
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // started, answer not yet written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
OipService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new Stream(this, context);
}

}  // namespace conv1d
