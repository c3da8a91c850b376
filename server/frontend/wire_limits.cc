#include "server/frontend/wire_limits.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv1d/v1/conv1d.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace conv1d {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

constexpr int kShapeField = 2;  // conv1d.v1.Tensor.shape
// The longest varint is 10 bytes, so a packed shape of more bytes than this
// holds more than kMaxWireRank dims or does not parse.
constexpr uint32_t kMaxPackedShapeBytes = kMaxWireRank * 10;
// The request messages nest Tensors two deep (InlineWeights).
constexpr int kMaxDepth = 4;

bool ContainsTensor(const Descriptor* d, int depth) {
  if (d == v1::Tensor::descriptor()) return true;
  if (depth >= kMaxDepth) return false;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->type() == FieldDescriptor::TYPE_MESSAGE &&
        ContainsTensor(f->message_type(), depth + 1)) {
      return true;
    }
  }
  return false;
}

// Dims seen so far per Tensor path; merged occurrences add up.
class DimCounts {
 public:
  int64_t* For(const std::string& path) {
    for (auto& [p, n] : counts_) {
      if (p == path) return &n;
    }
    counts_.emplace_back(path, 0);
    return &counts_.back().second;
  }
  // OK, or INVALID_ARGUMENT for the first path with more than `max` dims.
  absl::Status FirstOver(int64_t max) const {
    for (const auto& [path, n] : counts_) {
      if (n <= max) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".shape: more than ", max, " dims (", n, " or more sent); tensors have at most ",
          max, " dims"));
    }
    return absl::OkStatus();
  }
  // Forgets the dims under `path` (the field and everything in it).
  void Reset(const std::string& path) {
    for (auto& [p, n] : counts_) {
      if (p.compare(0, path.size(), path) == 0 &&
          (p.size() == path.size() || p[path.size()] == '.')) {
        n = 0;
      }
    }
  }

 private:
  std::vector<std::pair<std::string, int64_t>> counts_;
};

// Reads one Tensor up to the current limit, adding its dims to `dims`.
// False for bytes that do not parse (left to the parser).
bool ScanTensor(CodedInputStream* in, int64_t* dims) {
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->BytesUntilLimit() == 0;
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const WireFormatLite::WireType type = WireFormatLite::GetTagWireType(tag);
    if (number == kShapeField && type == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t dim = 0;
      if (!in->ReadVarint64(&dim)) return false;
      ++*dims;
    } else if (number == kShapeField && type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length) || length > INT32_MAX) return false;
      if (length > kMaxPackedShapeBytes) {
        // At least one dim per 10 bytes, or it does not parse: counted as
        // that many without reading them.
        *dims += (length + 9) / 10;
        if (!in->Skip(static_cast<int>(length))) return false;
        continue;
      }
      unsigned char packed[kMaxPackedShapeBytes];
      if (!in->ReadRaw(packed, static_cast<int>(length))) return false;
      // Every varint ends with the one byte of it below 0x80.
      for (uint32_t i = 0; i < length; ++i) *dims += packed[i] < 0x80 ? 1 : 0;
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return false;
    }
  }
}

// Reads a message of type `descriptor` up to the current limit (the end at
// depth 0), counting the dims of every Tensor in it under its path. False
// for bytes that do not parse.
bool ScanMessage(CodedInputStream* in, const Descriptor* descriptor,
                 const std::string& prefix, int depth, DimCounts* counts) {
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return depth == 0 || in->BytesUntilLimit() == 0;
    const FieldDescriptor* f =
        descriptor->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    // Setting one member of a oneof clears the others, and their tensors
    // with them.
    if (f != nullptr && f->containing_oneof() != nullptr &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WireTypeForFieldType(
                static_cast<WireFormatLite::FieldType>(f->type()))) {
      const google::protobuf::OneofDescriptor* oneof = f->containing_oneof();
      for (int i = 0; i < oneof->field_count(); ++i) {
        if (oneof->field(i) != f) counts->Reset(prefix + oneof->field(i)->name());
      }
    }
    const bool descend =
        f != nullptr && depth < kMaxDepth &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        f->type() == FieldDescriptor::TYPE_MESSAGE &&
        ContainsTensor(f->message_type(), depth + 1);
    if (!descend) {
      if (!WireFormatLite::SkipField(in, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length) || length > INT32_MAX) return false;
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    const std::string path = prefix + f->name();
    const bool ok = f->message_type() == v1::Tensor::descriptor()
                        ? ScanTensor(in, counts->For(path))
                        : ScanMessage(in, f->message_type(), path + ".", depth + 1, counts);
    if (!ok) return false;
    in->PopLimit(limit);
  }
}

}  // namespace

absl::Status CheckWireRanks(google::protobuf::io::ZeroCopyInputStream* bytes,
                            const Descriptor* descriptor) {
  CodedInputStream in(bytes);
  DimCounts counts;
  // Bytes that do not parse are the parser's to refuse.
  if (!ScanMessage(&in, descriptor, "", 0, &counts)) return absl::OkStatus();
  return counts.FirstOver(kMaxWireRank);
}

absl::Status CheckWireRanks(const grpc::ByteBuffer& bytes, const Descriptor* descriptor) {
  // The reader only reads the buffer, which gRPC owns.
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok()) return absl::OkStatus();  // left to the parser
  return CheckWireRanks(&reader, descriptor);
}

}  // namespace conv1d
