// LoadTransport over the Open Inference Protocol: ModelInfer of models
// conv1d_forward / conv1d_backward / conv1d_update (docs/triton.md) through
// the generated callback stub on Conv1dClient's channels. A pool request
// becomes, once, a ModelInferRequest with the same tensors (in
// raw_input_contents, or as shared_memory_* parameters naming the region)
// and parameters; a send with a region copies that small message and names
// its output slot in each output's parameters.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/load/load_transports.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace conv1d {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;

const char* OipDType(v1::DType wire) {
  absl::StatusOr<DType> d = FromWireDType(wire);
  if (!d.ok()) return "INVALID";
  switch (*d) {
    case DType::kF32: return "FP32";
    case DType::kF16: return "FP16";
    case DType::kBF16: return "BF16";
  }
  return "INVALID";
}

absl::StatusOr<v1::DType> WireDType(const std::string& oip) {
  if (oip == "FP32") return ToWireDType(DType::kF32);
  if (oip == "FP16") return ToWireDType(DType::kF16);
  if (oip == "BF16") return ToWireDType(DType::kBF16);
  return absl::InternalError(absl::StrCat("answer has datatype ", oip));
}

template <typename Req>
void CommonParams(const Req& r, ModelInferRequest* out) {
  auto& params = *out->mutable_parameters();
  params["activation"].set_string_param(r.activation() == v1::ACTIVATION_SILU ? "silu" : "none");
  params["layout"].set_string_param(r.layout() == v1::LAYOUT_CHANNEL_LAST ? "channel_last"
                                                                           : "channel_first");
  if (!r.weights_name().empty()) params["weights_name"].set_string_param(r.weights_name());
}

// The model, parameters and requested outputs of `p`.
void Header(const PreparedRequest& p, const WorkloadSpec& spec, ModelInferRequest* out) {
  std::vector<std::string> outputs;
  if (p.forward != nullptr) {
    out->set_model_name("conv1d_forward");
    CommonParams(*p.forward, out);
    outputs.push_back("y");
    if (p.forward->return_final_states()) outputs.push_back("final_states");
  } else if (p.backward != nullptr) {
    out->set_model_name("conv1d_backward");
    CommonParams(*p.backward, out);
    (*out->mutable_parameters())["grad_weight_fp32"].set_bool_param(
        p.backward->grad_weight_fp32());
    outputs = {"dx", "dweight"};
    if (spec.bias) outputs.push_back("dbias");
    if (p.backward->return_dinitial_states()) outputs.push_back("dinitial_states");
  } else {
    out->set_model_name("conv1d_update");
    CommonParams(*p.update, out);
    outputs = {"y", "conv_state_out"};
  }
  for (const std::string& name : outputs) out->add_outputs()->set_name(name);
}

// The conv1d.v1 response field of an output.
v1::Tensor* ResponseTensor(LoadAnswer* a, WorkloadOp op, const std::string& name) {
  google::protobuf::Message* m = &a->update;
  if (op == WorkloadOp::kForward) m = &a->forward;
  if (op == WorkloadOp::kBackward) m = &a->backward;
  const auto* field =
      m->GetDescriptor()->FindFieldByName(name == "conv_state_out" ? "conv_state" : name);
  if (field == nullptr) return nullptr;
  return static_cast<v1::Tensor*>(m->GetReflection()->MutableMessage(m, field));
}

class OipTransport final : public LoadTransport {
 public:
  OipTransport(std::string memory, Conv1dClient* client)
      : memory_(std::move(memory)), client_(client) {
    for (int i = 0; i < client->num_channels(); ++i) {
      stubs_.push_back(inference::GRPCInferenceService::NewStub(client->channel()));
    }
  }

  const char* protocol() const override { return "oip"; }
  const char* memory() const override { return memory_.c_str(); }

  absl::Status Prepare(const std::vector<const PreparedRequest*>& pool,
                       const std::vector<WorkloadSpec>& specs, int max_in_flight) override {
    pool_ = pool;
    if (memory_ != "grpc") {
      absl::StatusOr<std::unique_ptr<RegionLayout>> layout = RegionLayout::Create(
          memory_, absl::StrCat("conv1d_load_", getpid(), "_oip_", memory_), pool, specs,
          max_in_flight, client_);
      if (!layout.ok()) return layout.status();
      layout_ = *std::move(layout);
    }
    for (size_t i = 0; i < pool.size(); ++i) {
      auto m = std::make_shared<ModelInferRequest>();
      Header(*pool[i], specs[pool[i]->spec_index], m.get());
      const std::vector<NamedTensor> tensors = RequestTensors(*pool[i]);
      for (size_t k = 0; k < tensors.size(); ++k) {
        auto* in = m->add_inputs();
        in->set_name(tensors[k].name);
        in->set_datatype(OipDType(tensors[k].tensor->dtype()));
        for (int64_t d : tensors[k].tensor->shape()) in->add_shape(d);
        if (layout_ == nullptr) {
          m->add_raw_input_contents(tensors[k].tensor->data());
          continue;
        }
        const RegionLayout::Place& place = layout_->inputs(static_cast<int>(i))[k];
        auto& params = *in->mutable_parameters();
        params["shared_memory_region"].set_string_param(layout_->region().name());
        params["shared_memory_offset"].set_int64_param(place.offset);
        params["shared_memory_byte_size"].set_int64_param(place.bytes);
      }
      bases_.push_back(std::move(m));
    }
    return absl::OkStatus();
  }

  void Send(int index, bool want, const CallOptions& options, Done done) override {
    auto* call = new Call;
    call->index = index;
    call->want = want;
    call->done = std::move(done);
    const absl::Duration timeout = options.timeout > absl::ZeroDuration()
                                       ? options.timeout
                                       : client_->options().default_timeout;
    if (timeout > absl::ZeroDuration() && timeout < absl::InfiniteDuration()) {
      call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    }
    if (!client_->authorization().empty()) {
      call->ctx.AddMetadata("authorization", client_->authorization());
    }
    const ModelInferRequest* req = bases_[index].get();
    if (layout_ != nullptr) {
      call->slot = layout_->TakeSlot();
      if (call->slot < 0) {
        Done d = std::move(call->done);
        delete call;
        return d(absl::ResourceExhaustedError("no free output slot"));
      }
      call->places = layout_->outputs(index, call->slot);
      call->own = *bases_[index];
      for (auto& out : *call->own.mutable_outputs()) {
        for (const RegionLayout::Place& place : call->places) {
          if (place.name != out.name()) continue;
          auto& params = *out.mutable_parameters();
          params["shared_memory_region"].set_string_param(layout_->region().name());
          params["shared_memory_offset"].set_int64_param(place.offset);
          params["shared_memory_byte_size"].set_int64_param(place.bytes);
        }
      }
      req = &call->own;
    }
    inference::GRPCInferenceService::Stub* stub =
        stubs_[next_.fetch_add(1, std::memory_order_relaxed) % stubs_.size()].get();
    stub->async()->ModelInfer(&call->ctx, req, &call->resp,
                              [this, call](grpc::Status status) {
                                Finish(call, status);
                                delete call;
                              });
  }

  void Teardown() override { layout_.reset(); }

 private:
  struct Call {
    grpc::ClientContext ctx;
    ModelInferRequest own;  // with a region: the base with this send's slot
    ModelInferResponse resp;
    int index = 0;
    int slot = -1;
    bool want = false;
    std::vector<RegionLayout::Place> places;
    Done done;
  };

  void Finish(Call* call, const grpc::Status& status) {
    absl::Status s;
    if (!status.ok()) {
      s = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                       status.error_message());
    }
    LoadAnswer a;
    const ModelInferResponse& r = call->resp;
    const WorkloadOp op = pool_[call->index]->op;
    for (int i = 0; s.ok() && i < r.outputs_size(); ++i) {
      const auto& out = r.outputs(i);
      const RegionLayout::Place* place = nullptr;
      for (const RegionLayout::Place& p : call->places) {
        if (p.name == out.name()) place = &p;
      }
      const int64_t bytes = place != nullptr ? place->bytes
                            : i < r.raw_output_contents_size()
                                ? static_cast<int64_t>(r.raw_output_contents(i).size())
                                : 0;
      a.output_bytes += bytes;
      if (!call->want) continue;
      v1::Tensor* t = ResponseTensor(&a, op, out.name());
      if (t == nullptr) {
        s = absl::InternalError(absl::StrCat("answer has unexpected output ", out.name()));
        break;
      }
      absl::StatusOr<v1::DType> dtype = WireDType(out.datatype());
      if (!dtype.ok()) {
        s = dtype.status();
        break;
      }
      t->set_dtype(*dtype);
      t->mutable_shape()->Assign(out.shape().begin(), out.shape().end());
      if (place != nullptr) {
        s = ReadInto(layout_->region(), place->offset, place->bytes, t);
      } else if (i < r.raw_output_contents_size()) {
        t->set_data(r.raw_output_contents(i));
      }
    }
    if (call->slot >= 0) layout_->GiveSlot(call->slot);
    if (!s.ok()) return call->done(s);
    call->done(std::move(a));
  }

  const std::string memory_;
  Conv1dClient* const client_;
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
  std::vector<const PreparedRequest*> pool_;
  std::unique_ptr<RegionLayout> layout_;  // null: tensors in the messages
  std::vector<std::shared_ptr<const ModelInferRequest>> bases_;
};

}  // namespace

std::unique_ptr<LoadTransport> NewOipTransport(std::string memory, Conv1dClient* client) {
  return std::make_unique<OipTransport>(std::move(memory), client);
}

}  // namespace conv1d
