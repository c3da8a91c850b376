#include "server/frontend/oip_wire.h"

#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace conv1d {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using google::protobuf::internal::WireFormatLite;

constexpr int kRawInputField = 7;   // ModelInferRequest.raw_input_contents
constexpr int kRawOutputField = 6;  // ModelInferResponse.raw_output_contents

void AppendVarint(std::string* s, uint64_t v) {
  while (v >= 0x80) {
    s->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s->push_back(static_cast<char>(v));
}

// Copies the message into `shell` with large raw_input_contents entries
// replaced by empty ones and their bytes moved into *raw. False for
// anything unusual (the caller then parses the ordinary way).
bool Split(const grpc::ByteBuffer& bytes, int64_t min_bytes, const HostAllocator& allocate,
           std::string* shell, RawBuffers* raw) {
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok()) return false;
  CodedInputStream in(&reader);
  StringOutputStream stream(shell);
  CodedOutputStream out(&stream);
  const uint32_t raw_tag =
      WireFormatLite::MakeTag(kRawInputField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  int index = 0;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (tag != raw_tag) {
      if (!WireFormatLite::SkipField(&in, tag, &out)) return false;
      continue;
    }
    uint32_t n = 0;
    if (!in.ReadVarint32(&n)) return false;
    // A declared length past the bytes actually received allocates nothing.
    const int64_t left = static_cast<int64_t>(bytes.Length()) - in.CurrentPosition();
    if (static_cast<int64_t>(n) > left) return false;
    out.WriteTag(tag);
    if (n == 0 || static_cast<int64_t>(n) < min_bytes) {
      std::string data;
      if (!in.ReadString(&data, static_cast<int>(n))) return false;
      out.WriteVarint32(n);
      out.WriteString(data);
    } else {
      HostBuffer buffer = allocate(n);
      if (!in.ReadRaw(buffer.data.get(), static_cast<int>(n))) return false;
      out.WriteVarint32(0);
      raw->buffers.resize(index + 1);
      raw->bytes.resize(index + 1);
      raw->buffers[index] = std::move(buffer);
      raw->bytes[index] = n;
    }
    ++index;
  }
  return in.ConsumedEntireMessage() && !out.HadError();
}

}  // namespace

absl::Status ParseInferRequest(const grpc::ByteBuffer& bytes, int64_t min_bytes,
                               const HostAllocator& allocate,
                               inference::ModelInferRequest* request, RawBuffers* raw) {
  if (min_bytes >= 0) {
    std::string shell;
    RawBuffers moved;
    if (Split(bytes, min_bytes, allocate, &shell, &moved) && request->ParseFromString(shell)) {
      *raw = std::move(moved);
      return absl::OkStatus();
    }
  }
  *raw = RawBuffers();
  return ParseMessage(bytes, request);
}

absl::Status SerializeInferResponse(inference::ModelInferResponse* response,
                                    const RawBuffers& raw, grpc::ByteBuffer* out) {
  // Everything but the raw contents first, then every raw entry in order
  // (protobuf parsers accept fields in any order; a repeated field's
  // elements keep theirs).
  google::protobuf::RepeatedPtrField<std::string> contents;
  contents.Swap(response->mutable_raw_output_contents());
  std::string head;
  if (!response->SerializeToString(&head)) {
    return absl::InternalError("response: serialization failed");
  }
  const uint32_t tag =
      WireFormatLite::MakeTag(kRawOutputField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  std::vector<grpc::Slice> slices;
  for (int i = 0; i < contents.size(); ++i) {
    const HostBuffer* b = raw.Find(i);
    const std::string& inline_bytes = contents.Get(i);
    const uint64_t n = b != nullptr ? static_cast<uint64_t>(raw.bytes[i]) : inline_bytes.size();
    AppendVarint(&head, tag);
    AppendVarint(&head, n);
    if (b == nullptr) {
      head += inline_bytes;
      continue;
    }
    slices.emplace_back(head);
    head.clear();
    if (n == 0) continue;
    // The slice keeps the buffer alive until gRPC has sent it.
    auto* keep = new std::shared_ptr<void>(b->data);
    slices.emplace_back(
        keep->get(), static_cast<size_t>(n),
        [](void* k) { delete static_cast<std::shared_ptr<void>*>(k); }, keep);
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  *out = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

}  // namespace conv1d
