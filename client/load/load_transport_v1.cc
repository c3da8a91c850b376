// LoadTransport over conv1d.v1.Conv1d: Forward/Backward/Update through
// Conv1dClient's async calls. With a region, a request's tensors are
// Tensor.shared_memory references (data empty) and its outputs go where
// output_shared_memory says (load_transport.h).
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/load/load_transports.h"

namespace conv1d {
namespace {

v1::Tensor* ForwardTensor(v1::ForwardRequest* r, absl::string_view name) {
  if (name == "x") return r->mutable_x();
  if (name == "weight") return r->mutable_inline_weights()->mutable_weight();
  if (name == "bias") return r->mutable_inline_weights()->mutable_bias();
  return r->mutable_initial_states();
}

template <typename Resp>
Conv1dClient::Callback<Resp> Answer(bool want, LoadTransport::Done done,
                                    Resp LoadAnswer::*field) {
  return [want, done = std::move(done), field](absl::StatusOr<Resp> r) mutable {
    if (!r.ok()) return done(r.status());
    LoadAnswer a;
    a.output_bytes = TensorPayloadBytes(*r);
    if (want) a.*field = *std::move(r);
    done(std::move(a));
  };
}

class V1Transport final : public LoadTransport {
 public:
  V1Transport(std::string memory, Conv1dClient* client)
      : memory_(std::move(memory)), client_(client) {}

  const char* protocol() const override { return "v1"; }
  const char* memory() const override { return memory_.c_str(); }

  absl::Status Prepare(const std::vector<const PreparedRequest*>& pool,
                       const std::vector<WorkloadSpec>& specs, int max_in_flight) override {
    pool_ = pool;
    if (memory_ == "grpc") return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<RegionLayout>> layout = RegionLayout::Create(
        memory_, absl::StrCat("conv1d_load_", getpid(), "_v1_", memory_), pool, specs,
        max_in_flight, client_);
    if (!layout.ok()) return layout.status();
    layout_ = *std::move(layout);
    for (size_t i = 0; i < pool.size(); ++i) {
      auto m = std::make_shared<v1::ForwardRequest>(*pool[i]->forward);
      for (const RegionLayout::Place& place : layout_->inputs(static_cast<int>(i))) {
        v1::Tensor* t = ForwardTensor(m.get(), place.name);
        t->clear_data();
        t->mutable_shared_memory()->set_region(layout_->region().name());
        t->mutable_shared_memory()->set_offset(place.offset);
      }
      bases_.push_back(std::move(m));
    }
    return absl::OkStatus();
  }

  void Send(int index, bool want, const CallOptions& call, Done done) override {
    const PreparedRequest& p = *pool_[index];
    if (layout_ == nullptr) {
      switch (p.op) {
        case WorkloadOp::kForward:
          return client_->ForwardAsync(p.forward, call,
                                       Answer(want, std::move(done), &LoadAnswer::forward));
        case WorkloadOp::kBackward:
          return client_->BackwardAsync(p.backward, call,
                                        Answer(want, std::move(done), &LoadAnswer::backward));
        case WorkloadOp::kUpdate:
          return client_->UpdateAsync(p.update, call,
                                      Answer(want, std::move(done), &LoadAnswer::update));
      }
    }
    const int slot = layout_->TakeSlot();
    if (slot < 0) return done(absl::ResourceExhaustedError("no free output slot"));
    auto m = std::make_shared<v1::ForwardRequest>(*bases_[index]);
    std::vector<RegionLayout::Place> outs = layout_->outputs(index, slot);
    for (const RegionLayout::Place& o : outs) {
      v1::SharedMemoryRef& ref = (*m->mutable_output_shared_memory())[o.name];
      ref.set_region(layout_->region().name());
      ref.set_offset(o.offset);
    }
    client_->ForwardAsync(
        std::move(m), call,
        [this, slot, want, outs = std::move(outs),
         done = std::move(done)](absl::StatusOr<v1::ForwardResponse> r) mutable {
          absl::Status s = r.status();
          LoadAnswer a;
          for (const RegionLayout::Place& o : outs) a.output_bytes += o.bytes;
          if (s.ok() && want) {
            a.forward = *std::move(r);
            for (const RegionLayout::Place& o : outs) {
              v1::Tensor* t = o.name == "y" ? a.forward.mutable_y()
                                            : a.forward.mutable_final_states();
              if (s.ok()) s = ReadInto(layout_->region(), o.offset, o.bytes, t);
            }
          }
          layout_->GiveSlot(slot);
          if (!s.ok()) return done(s);
          done(std::move(a));
        });
  }

  void Teardown() override { layout_.reset(); }

 private:
  const std::string memory_;
  Conv1dClient* const client_;
  std::vector<const PreparedRequest*> pool_;
  std::unique_ptr<RegionLayout> layout_;  // null: tensors in the messages
  std::vector<std::shared_ptr<const v1::ForwardRequest>> bases_;
};

}  // namespace

std::unique_ptr<LoadTransport> NewV1Transport(std::string memory, Conv1dClient* client) {
  return std::make_unique<V1Transport>(std::move(memory), client);
}

}  // namespace conv1d
