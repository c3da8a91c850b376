#include "client/load/load_transport.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/load/load_transports.h"

namespace conv1d {
namespace {

constexpr int64_t kAlign = 64;

int64_t Aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t TensorBytes(const v1::Tensor& t) {
  absl::StatusOr<DType> dtype = FromWireDType(t.dtype());
  int64_t n = dtype.ok() ? DTypeSize(*dtype) : 4;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

}  // namespace

bool IsLoadProtocol(absl::string_view protocol) {
  return protocol == "v1" || protocol == "oip";
}

bool IsLoadMemory(absl::string_view memory) {
  return memory == "grpc" || IsRegionKind(memory);
}

absl::StatusOr<std::unique_ptr<LoadTransport>> MakeLoadTransport(absl::string_view protocol,
                                                                 absl::string_view memory,
                                                                 Conv1dClient* client) {
  if (!IsLoadProtocol(protocol)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol: '", protocol, "' is not v1 or oip"));
  }
  if (!IsLoadMemory(memory)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory: '", memory, "' is not grpc or system"));
  }
  if (protocol == "v1") return NewV1Transport(std::string(memory), client);
  return NewOipTransport(std::string(memory), client);
}

std::vector<NamedTensor> RequestTensors(const PreparedRequest& p) {
  std::vector<NamedTensor> out;
  auto add = [&out](const char* name, bool has, const v1::Tensor& t) {
    if (has) out.push_back({name, &t});
  };
  if (p.forward != nullptr) {
    const v1::ForwardRequest& r = *p.forward;
    add("x", r.has_x(), r.x());
    add("weight", r.has_inline_weights(), r.inline_weights().weight());
    add("bias", r.has_inline_weights() && r.inline_weights().has_bias(),
        r.inline_weights().bias());
    add("initial_states", r.has_initial_states(), r.initial_states());
  } else if (p.backward != nullptr) {
    const v1::BackwardRequest& r = *p.backward;
    add("x", r.has_x(), r.x());
    add("weight", r.has_inline_weights(), r.inline_weights().weight());
    add("bias", r.has_inline_weights() && r.inline_weights().has_bias(),
        r.inline_weights().bias());
    add("initial_states", r.has_initial_states(), r.initial_states());
    add("dout", r.has_dout(), r.dout());
    add("dfinal_states", r.has_dfinal_states(), r.dfinal_states());
  } else if (p.update != nullptr) {
    const v1::UpdateRequest& r = *p.update;
    add("x", r.has_x(), r.x());
    add("weight", r.has_inline_weights(), r.inline_weights().weight());
    add("bias", r.has_inline_weights() && r.inline_weights().has_bias(),
        r.inline_weights().bias());
    add("conv_state", r.has_conv_state(), r.conv_state());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RegionLayout>> RegionLayout::Create(
    absl::string_view kind, const std::string& name,
    const std::vector<const PreparedRequest*>& pool, const std::vector<WorkloadSpec>& specs,
    int slots, Conv1dClient* client) {
  std::unique_ptr<RegionLayout> layout(new RegionLayout());
  layout->client_ = client;
  int64_t at = 0;
  for (const PreparedRequest* p : pool) {
    if (p->forward == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--memory=", kind, ": serves fwd workloads only, not ",
          WorkloadOpName(p->op)));
    }
    std::vector<Place> in;
    for (const NamedTensor& t : RequestTensors(*p)) {
      const int64_t bytes = static_cast<int64_t>(t.tensor->data().size());
      in.push_back({t.name, at, bytes});
      at += Aligned(bytes);
    }
    layout->inputs_.push_back(std::move(in));
    const WorkloadSpec& spec = specs[p->spec_index];
    std::vector<Place> out;
    const int64_t y = TensorBytes(p->forward->x());
    out.push_back({"y", 0, y});
    if (p->forward->return_final_states()) {
      absl::StatusOr<DType> dtype = FromWireDType(p->forward->x().dtype());
      const int64_t states = spec.batch * spec.dim * (spec.width - 1) *
                             (dtype.ok() ? DTypeSize(*dtype) : 4);
      out.push_back({"final_states", Aligned(y), states});
    }
    layout->slot_bytes_ = std::max(layout->slot_bytes_, Aligned(out.back().offset +
                                                                out.back().bytes));
    layout->outputs_.push_back(std::move(out));
  }
  layout->slots_offset_ = at;
  absl::StatusOr<std::unique_ptr<TensorRegion>> region =
      CreateRegion(kind, name, at + static_cast<int64_t>(slots) * layout->slot_bytes_);
  if (!region.ok()) return region.status();
  layout->region_ = *std::move(region);
  for (size_t i = 0; i < pool.size(); ++i) {
    const std::vector<NamedTensor> tensors = RequestTensors(*pool[i]);
    for (size_t k = 0; k < tensors.size(); ++k) {
      const Place& place = layout->inputs_[i][k];
      absl::Status s = layout->region_->Write(place.offset, tensors[k].tensor->data().data(),
                                              place.bytes);
      if (!s.ok()) return s;
    }
  }
  {
    absl::MutexLock lock(&layout->mu_);
    for (int s = slots - 1; s >= 0; --s) layout->free_.push_back(s);
  }
  absl::Status s = layout->region_->Register(client->channel(), client->authorization());
  if (!s.ok()) return s;
  layout->registered_ = true;
  return layout;
}

RegionLayout::~RegionLayout() { Unregister(); }

void RegionLayout::Unregister() {
  if (!registered_) return;
  registered_ = false;
  region_->Unregister(client_->channel(), client_->authorization()).IgnoreError();
}

std::vector<RegionLayout::Place> RegionLayout::outputs(int index, int slot) const {
  std::vector<Place> out = outputs_[index];
  for (Place& p : out) p.offset += slots_offset_ + static_cast<int64_t>(slot) * slot_bytes_;
  return out;
}

int RegionLayout::TakeSlot() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void RegionLayout::GiveSlot(int slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

absl::Status ReadInto(TensorRegion& region, int64_t offset, int64_t bytes, v1::Tensor* t) {
  std::string* data = t->mutable_data();
  data->resize(static_cast<size_t>(bytes));
  t->clear_shared_memory();
  return region.Read(offset, data->data(), bytes);
}

}  // namespace conv1d
