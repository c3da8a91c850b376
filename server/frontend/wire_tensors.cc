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
#include "server/frontend/wire_limits.h"

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

// Protobuf's parser without the rank check.
absl::Status ParseOrdinary(const grpc::ByteBuffer& bytes, Message* message) {
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

// The split parser reads tags and lengths by protobuf's own rules (those of
// its parser, not of the more lenient CodedInputStream::ReadTag) and copies
// every byte it does not move into the shell exactly as it was sent, so that
// the shell parses if and only if the original does. Anything else unusual
// makes it give up, and the message is parsed the ordinary way.

// Protobuf's parser reads a tag of at most 5 bytes.
constexpr int kMaxTagBytes = 5;
// ... and a length of at most 5 bytes, the fifth below 8, at most
// INT32_MAX - 16 (its parser's slop bytes).
constexpr int kMaxLengthBytes = 5;
constexpr uint64_t kMaxLength = 0x7fffffff - 16;
constexpr int kMaxVarintBytes = 10;

// Reads a varint of at most `max_bytes` bytes, appending its bytes as sent
// to `raw` (may be null). False when it is longer or the input ends.
bool ReadVarintRaw(CodedInputStream* in, int max_bytes, uint64_t* value,
                   std::string* raw) {
  uint64_t v = 0;
  for (int i = 0; i < max_bytes; ++i) {
    uint8_t b = 0;
    if (!in->ReadRaw(&b, 1)) return false;
    if (raw != nullptr) raw->push_back(static_cast<char>(b));
    v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if (b < 0x80) {
      *value = v;
      return true;
    }
  }
  return false;
}

// A tag as protobuf's parser reads it (value modulo 2^32); 0 is refused.
bool ReadTagRaw(CodedInputStream* in, uint32_t* tag, std::string* raw) {
  uint64_t v = 0;
  if (!ReadVarintRaw(in, kMaxTagBytes, &v, raw)) return false;
  *tag = static_cast<uint32_t>(v);
  return *tag != 0;
}

// A length as protobuf's parser reads it, within the current limit.
bool ReadLengthRaw(CodedInputStream* in, uint32_t* length, std::string* raw) {
  const size_t at = raw != nullptr ? raw->size() : 0;
  std::string own;
  std::string* bytes = raw != nullptr ? raw : &own;
  uint64_t v = 0;
  if (!ReadVarintRaw(in, kMaxLengthBytes, &v, bytes)) return false;
  if (bytes->size() - at == kMaxLengthBytes &&
      static_cast<uint8_t>(bytes->back()) >= 8) {
    return false;
  }
  if (v > kMaxLength || static_cast<int64_t>(v) > in->BytesUntilLimit()) return false;
  *length = static_cast<uint32_t>(v);
  return true;
}

// Copies the value of a field of wire type `type` into `shell` as sent.
// Groups (deprecated, never sent by this API's clients) give up.
bool CopyValue(CodedInputStream* in, uint32_t type, std::string* shell) {
  switch (type) {
    case WireFormatLite::WIRETYPE_VARINT: {
      uint64_t v = 0;
      return ReadVarintRaw(in, kMaxVarintBytes, &v, shell);
    }
    case WireFormatLite::WIRETYPE_FIXED64:
    case WireFormatLite::WIRETYPE_FIXED32: {
      const int n = type == WireFormatLite::WIRETYPE_FIXED64 ? 8 : 4;
      char b[8];
      if (!in->ReadRaw(b, n)) return false;
      shell->append(b, n);
      return true;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      uint32_t n = 0;
      if (!ReadLengthRaw(in, &n, shell)) return false;
      const size_t at = shell->size();
      shell->resize(at + n);
      return in->ReadRaw(shell->data() + at, static_cast<int>(n));
    }
    default:
      return false;
  }
}

}  // namespace

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, Message* message) {
  if (absl::Status s = CheckWireRanks(bytes, message->GetDescriptor()); !s.ok()) {
    message->Clear();
    return s;
  }
  return ParseOrdinary(bytes, message);
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
  bool data_seen = false;
  std::string head;
  while (in->BytesUntilLimit() > 0) {
    head.clear();
    uint32_t tag = 0;
    if (!ReadTagRaw(in, &tag, &head)) return false;
    if (tag != kDataTag) {
      shell->append(head);
      if (!CopyValue(in, WireFormatLite::GetTagWireType(tag), shell)) return false;
      continue;
    }
    if (data_seen) return false;  // repeated data: the last one wins; leave it to protobuf
    data_seen = true;
    uint32_t n = 0;
    // A declared length past the bytes actually received allocates nothing.
    if (!ReadLengthRaw(in, &n, &head)) return false;
    if (n == 0 || static_cast<int64_t>(n) < min_bytes) {
      shell->append(head);
      const size_t at = shell->size();
      shell->resize(at + n);
      if (!in->ReadRaw(shell->data() + at, static_cast<int>(n))) return false;
      continue;
    }
    HostBuffer buffer = allocate(n);
    if (!in->ReadRaw(buffer.data.get(), static_cast<int>(n))) return false;
    moved->buffer = std::move(buffer);
    moved->bytes = n;
  }
  return in->BytesUntilLimit() == 0;
}

// Copies the message into `shell`, each top-level Tensor's large data moved
// out into `moved`. False for anything unusual (the caller then parses the
// ordinary way).
bool Split(const grpc::ByteBuffer& bytes, const Descriptor* descriptor,
           int64_t min_bytes, const HostAllocator& allocate, std::string* shell,
           std::vector<Moved>* moved) {
  if (bytes.Length() > static_cast<size_t>(INT32_MAX)) return false;
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok()) return false;
  CodedInputStream in(&reader);
  in.PushLimit(static_cast<int>(bytes.Length()));
  std::vector<int> seen;
  std::string head;
  while (in.BytesUntilLimit() > 0) {
    head.clear();
    uint32_t tag = 0;
    if (!ReadTagRaw(&in, &tag, &head)) return false;
    const FieldDescriptor* f =
        descriptor->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        !IsTensorField(f)) {
      shell->append(head);
      if (!CopyValue(&in, WireFormatLite::GetTagWireType(tag), shell)) return false;
      continue;
    }
    // A message field sent twice is merged by protobuf: leave that to it.
    if (std::find(seen.begin(), seen.end(), f->number()) != seen.end()) return false;
    seen.push_back(f->number());
    uint32_t length = 0;
    if (!ReadLengthRaw(&in, &length, nullptr)) return false;
    const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
    std::string tensor;
    Moved m;
    if (!SplitTensor(&in, min_bytes, allocate, &tensor, &m)) return false;
    in.PopLimit(limit);
    shell->append(head);
    AppendVarint(shell, tensor.size());
    shell->append(tensor);
    if (m.buffer.data != nullptr) {
      m.field = f;
      moved->push_back(std::move(m));
    }
  }
  return in.BytesUntilLimit() == 0;
}

}  // namespace

void DetachedTensors::Add(const v1::Tensor* tensor, HostBuffer buffer, int64_t bytes) {
  entries_.push_back(Entry{tensor, std::move(buffer.data), bytes, Placement{buffer.kind}});
}

void DetachedTensors::Add(const v1::Tensor* tensor, std::shared_ptr<void> data,
                          int64_t bytes, Placement where) {
  entries_.push_back(Entry{tensor, std::move(data), bytes, where});
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
  if (absl::Status s = CheckWireRanks(bytes, message->GetDescriptor()); !s.ok()) {
    message->Clear();
    return s;
  }
  if (min_bytes < 0) return ParseOrdinary(bytes, message);
  std::string shell;
  std::vector<Moved> moved;
  if (!Split(bytes, message->GetDescriptor(), min_bytes, allocate, &shell, &moved) ||
      !message->ParseFromString(shell)) {
    return ParseOrdinary(bytes, message);
  }
  const Reflection* r = message->GetReflection();
  for (const Moved& m : moved) {
    // A later member of the same oneof may have replaced the tensor.
    if (!r->HasField(*message, m.field)) return ParseOrdinary(bytes, message);
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
