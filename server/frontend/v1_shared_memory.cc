#include "server/frontend/v1_shared_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "conv1d/v1/conv1d.pb.h"

namespace conv1d {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool IsMessageOf(const FieldDescriptor* f, const google::protobuf::Descriptor* d) {
  return f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() &&
         f->message_type() == d;
}

// product(shape) * sizeof(dtype); -1 when that is not a valid size.
int64_t TensorBytes(const v1::Tensor& t) {
  absl::StatusOr<DType> dtype = FromWireDType(t.dtype(), "dtype");
  if (!dtype.ok()) return -1;
  int64_t n = DTypeSize(*dtype);
  for (int64_t d : t.shape()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

absl::Status Attach(const v1::Tensor& t, const std::string& field,
                    const SharedMemoryRegistry* shm, const RegionUser& user,
                    DetachedTensors* detached,
                    std::vector<std::shared_ptr<void>>* leases) {
  if (!t.has_shared_memory()) return absl::OkStatus();
  if (!t.data().empty() || detached->Find(&t) != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": data and shared_memory are both set"));
  }
  if (shm == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": this server has no shared-memory regions"));
  }
  const int64_t bytes = TensorBytes(t);
  if (bytes < 0) return absl::OkStatus();  // validation names the bad dtype or shape
  absl::StatusOr<SharedSpan> span = shm->Resolve(
      t.shared_memory().region(), t.shared_memory().offset(), bytes, field, user);
  if (!span.ok()) return span.status();
  detached->Add(&t, std::move(span->data), span->bytes, span->where);
  leases->push_back(std::move(span->lease));
  return absl::OkStatus();
}

OutputView* OutputNamed(ConvSegment* s, Op op, const std::string& name) {
  if (name == "y" && op != Op::kBackward) return &s->y;
  if (op == Op::kForward && name == "final_states") return &s->final_states;
  if (op == Op::kBackward) {
    if (name == "dx") return &s->dx;
    if (name == "dweight") return &s->dweight;
    if (name == "dbias") return &s->dbias;
    if (name == "dinitial_states") return &s->dinitial_states;
  }
  if (op == Op::kUpdate && name == "conv_state") return &s->conv_state_out;
  return nullptr;
}

}  // namespace

absl::Status AttachSharedInputs(const Message& request, const SharedMemoryRegistry* shm,
                                const RegionUser& user, DetachedTensors* detached,
                                std::vector<std::shared_ptr<void>>* leases) {
  const google::protobuf::Reflection* r = request.GetReflection();
  const google::protobuf::Descriptor* d = request.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (IsMessageOf(f, v1::Tensor::descriptor()) && r->HasField(request, f)) {
      const auto& t = static_cast<const v1::Tensor&>(r->GetMessage(request, f));
      if (absl::Status s = Attach(t, f->name(), shm, user, detached, leases); !s.ok()) {
        return s;
      }
    } else if (IsMessageOf(f, v1::InlineWeights::descriptor()) && r->HasField(request, f)) {
      const auto& w = static_cast<const v1::InlineWeights&>(r->GetMessage(request, f));
      if (w.has_weight()) {
        absl::Status s =
            Attach(w.weight(), "inline_weights.weight", shm, user, detached, leases);
        if (!s.ok()) return s;
      }
      if (w.has_bias()) {
        absl::Status s = Attach(w.bias(), "inline_weights.bias", shm, user, detached, leases);
        if (!s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveSharedOutputs(const Message& request, const SharedMemoryRegistry* shm,
                                  const RegionUser& user, ValidatedCall* call,
                                  std::vector<SharedOutput>* outputs,
                                  std::vector<std::shared_ptr<void>>* leases) {
  const FieldDescriptor* f = request.GetDescriptor()->FindFieldByName("output_shared_memory");
  if (f == nullptr) return absl::OkStatus();
  const google::protobuf::Reflection* r = request.GetReflection();
  const int n = r->FieldSize(request, f);
  for (int i = 0; i < n; ++i) {
    // Map entries: key = 1, value = 2.
    const Message& entry = r->GetRepeatedMessage(request, f, i);
    const google::protobuf::Descriptor* ed = entry.GetDescriptor();
    const std::string name =
        entry.GetReflection()->GetString(entry, ed->FindFieldByNumber(1));
    const auto& ref = static_cast<const v1::SharedMemoryRef&>(
        entry.GetReflection()->GetMessage(entry, ed->FindFieldByNumber(2)));
    const std::string field = absl::StrCat("output_shared_memory[\"", name, "\"]");
    OutputView* view = OutputNamed(&call->segment, call->key.op, name);
    if (view == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": not an output of ", OpName(call->key.op)));
    }
    if (view->bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": the request does not return ", name));
    }
    if (shm == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ": this server has no shared-memory regions"));
    }
    absl::StatusOr<SharedSpan> span =
        shm->Resolve(ref.region(), ref.offset(), view->bytes, field, user);
    if (!span.ok()) return span.status();
    SharedOutput out;
    out.field = name;
    out.view = view;
    out.bytes = view->bytes;
    out.region = ref.region();
    leases->push_back(std::move(span->lease));
    out.span = *std::move(span);
    outputs->push_back(std::move(out));
  }
  return absl::OkStatus();
}

void HideSharedOutputs(std::vector<SharedOutput>* outputs) {
  for (SharedOutput& o : *outputs) o.view->bytes = 0;
}

void PlaceSharedOutputs(std::vector<SharedOutput>* outputs, Message* response) {
  const google::protobuf::Reflection* r = response->GetReflection();
  for (SharedOutput& o : *outputs) {
    o.view->bytes = o.bytes;
    o.view->data = o.span.data.get();
    o.view->where = o.span.where;
    const FieldDescriptor* f = response->GetDescriptor()->FindFieldByName(o.field);
    auto* t = static_cast<v1::Tensor*>(r->MutableMessage(response, f));
    t->clear_data();
    t->mutable_shared_memory()->set_region(o.region);
    t->mutable_shared_memory()->set_offset(o.span.where.offset);
  }
}

}  // namespace conv1d
