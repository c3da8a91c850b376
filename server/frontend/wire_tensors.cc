#include "server/frontend/wire_tensors.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace conv1d {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using google::protobuf::internal::WireFormatLite;

// conv1d.v1.Tensor.data: field 3, length-delimited.
constexpr uint32_t kDataTag = (3u << 3) | WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

bool IsTensorField(const FieldDescriptor* f) {
  return f != nullptr && !f->is_repeated() &&
         f->type() == FieldDescriptor::TYPE_MESSAGE &&
         f->message_type() == v1::Tensor::descriptor();
}

const v1::Tensor* AsTensor(const Message& m) {
  return google::protobuf::DynamicCastToGenerated<v1::Tensor>(&m);
}

void AppendVarint(std::string* s, uint64_t v) {
  while (v >= 0x80) {
    s->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s->push_back(static_cast<char>(v));
}

}  // namespace

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, Message* message) {
  message->Clear();
  // The reader only reads the buffer, which gRPC owns.
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request: ", bytes.Length(), " bytes that do not parse as a ",
                     message->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

namespace {

// A tensor field whose data was read into a host buffer.
struct Moved {
  const FieldDescriptor* field = nullptr;
  HostBuffer buffer;
  int64_t bytes = 0;
};

// Reads one Tensor's fields (up to the current limit, which the caller keeps
// within the bytes received) into `shell`, moving its data into a host buffer
// when large enough. False for anything unusual.
bool SplitTensor(CodedInputStream* in, int64_t min_bytes, const HostAllocator& allocate,
                 std::string* shell, Moved* moved) {
  StringOutputStream stream(shell);
  CodedOutputStream out(&stream);
  bool data_seen = false;
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) break;
    if (tag != kDataTag) {
      if (!WireFormatLite::SkipField(in, tag, &out)) return false;
      continue;
    }
    if (data_seen) return false;  // repeated data: the last one wins; leave it to protobuf
    data_seen = true;
    uint32_t n = 0;
    if (!in->ReadVarint32(&n)) return false;
    // A declared length past the bytes actually received allocates nothing.
    if (static_cast<int64_t>(n) > in->BytesUntilLimit()) return false;
    if (n == 0 || static_cast<int64_t>(n) < min_bytes) {
      std::string data;
      if (!in->ReadString(&data, static_cast<int>(n))) return false;
      out.WriteTag(tag);
      out.WriteVarint32(n);
      out.WriteString(data);
      continue;
    }
    HostBuffer buffer = allocate(n);
    if (!in->ReadRaw(buffer.data.get(), static_cast<int>(n))) return false;
    moved->buffer = std::move(buffer);
    moved->bytes = n;
  }
  // The end of input also ends the loop: the tensor must fill its length.
  return in->ConsumedEntireMessage() && in->BytesUntilLimit() == 0 && !out.HadError();
}

// Copies the message into `shell`, each top-level Tensor's large data moved
// out into `moved`. False for anything unusual (the caller then parses the
// ordinary way).
bool Split(const grpc::ByteBuffer& bytes, const Descriptor* descriptor,
           int64_t min_bytes, const HostAllocator& allocate, std::string* shell,
           std::vector<Moved>* moved) {
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok()) return false;
  CodedInputStream in(&reader);
  StringOutputStream stream(shell);
  CodedOutputStream out(&stream);
  std::vector<int> seen;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    const FieldDescriptor* f =
        descriptor->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        !IsTensorField(f)) {
      if (!WireFormatLite::SkipField(&in, tag, &out)) return false;
      continue;
    }
    // A message field sent twice is merged by protobuf: leave that to it.
    if (std::find(seen.begin(), seen.end(), f->number()) != seen.end()) return false;
    seen.push_back(f->number());
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    // Longer than what was received: this also bounds SplitTensor's limit.
    const int64_t received_left = static_cast<int64_t>(bytes.Length()) - in.CurrentPosition();
    if (static_cast<int64_t>(length) > received_left) return false;
    const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
    std::string tensor;
    Moved m;
    if (!SplitTensor(&in, min_bytes, allocate, &tensor, &m)) return false;
    in.PopLimit(limit);
    out.WriteTag(tag);
    out.WriteVarint32(static_cast<uint32_t>(tensor.size()));
    out.WriteString(tensor);
    if (m.buffer.data != nullptr) {
      m.field = f;
      moved->push_back(std::move(m));
    }
  }
  return in.ConsumedEntireMessage() && !out.HadError();
}

}  // namespace

void DetachedTensors::Add(const v1::Tensor* tensor, HostBuffer buffer, int64_t bytes) {
  entries_.push_back(Entry{tensor, std::move(buffer.data), bytes, buffer.kind});
}

const DetachedTensors::Entry* DetachedTensors::Find(const v1::Tensor* tensor) const {
  for (const Entry& e : entries_) {
    if (e.tensor == tensor) return &e;
  }
  return nullptr;
}

absl::Status ParseWithDetachedData(const grpc::ByteBuffer& bytes, Message* message,
                                   int64_t min_bytes, const HostAllocator& allocate,
                                   DetachedTensors* detached) {
  if (min_bytes < 0) return ParseMessage(bytes, message);
  std::string shell;
  std::vector<Moved> moved;
  if (!Split(bytes, message->GetDescriptor(), min_bytes, allocate, &shell, &moved) ||
      !message->ParseFromString(shell)) {
    return ParseMessage(bytes, message);
  }
  const Reflection* r = message->GetReflection();
  for (const Moved& m : moved) {
    // A later member of the same oneof may have replaced the tensor.
    if (!r->HasField(*message, m.field)) return ParseMessage(bytes, message);
  }
  for (Moved& m : moved) {
    detached->Add(AsTensor(r->GetMessage(*message, m.field)), std::move(m.buffer),
                  m.bytes);
  }
  return absl::OkStatus();
}

absl::Status SerializeWithDetachedData(const Message& message,
                                       const DetachedTensors& detached,
                                       grpc::ByteBuffer* out) {
  // The fields whose data is detached, in field order; the rest of the
  // message is serialized the ordinary way first (protobuf parsers accept
  // fields in any order).
  struct Part {
    const FieldDescriptor* field;
    const v1::Tensor* tensor;
    const DetachedTensors::Entry* entry;
  };
  std::vector<Part> parts;
  const Descriptor* d = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (!IsTensorField(f) || !r->HasField(message, f)) continue;
    const v1::Tensor* t = AsTensor(r->GetMessage(message, f));
    const DetachedTensors::Entry* e = t != nullptr ? detached.Find(t) : nullptr;
    if (e != nullptr) parts.push_back(Part{f, t, e});
  }
  std::unique_ptr<Message> rest;
  if (!parts.empty()) {
    rest.reset(message.New());
    rest->CopyFrom(message);
    for (const Part& p : parts) rest->GetReflection()->ClearField(rest.get(), p.field);
  }
  std::string head;
  if (!(rest != nullptr ? *rest : message).SerializeToString(&head)) {
    return absl::InternalError("response: serialization failed");
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * parts.size() + 1);
  for (const Part& p : parts) {
    if (!p.tensor->data().empty()) {
      return absl::InternalError(absl::StrCat("response: ", p.field->name(),
                                              " has data both inline and detached"));
    }
    std::string tensor;
    if (!p.tensor->SerializeToString(&tensor)) {
      return absl::InternalError("response: serialization failed");
    }
    const uint64_t n = static_cast<uint64_t>(p.entry->bytes);
    const uint64_t inner = tensor.size() + 1 +
                           CodedOutputStream::VarintSize64(n) + n;
    AppendVarint(&head, WireFormatLite::MakeTag(
                            p.field->number(), WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    AppendVarint(&head, inner);
    head += tensor;
    head.push_back(static_cast<char>(kDataTag));
    AppendVarint(&head, n);
    slices.emplace_back(head);
    head.clear();
    if (n == 0) continue;
    // The slice keeps the buffer alive until gRPC has sent it.
    auto* keep = new std::shared_ptr<void>(p.entry->buffer);
    slices.emplace_back(
        keep->get(), static_cast<size_t>(n),
        [](void* k) { delete static_cast<std::shared_ptr<void>*>(k); }, keep);
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  *out = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

}  // namespace conv1d
