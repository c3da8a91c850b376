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

 private:
  std::vector<std::pair<std::string, int64_t>> counts_;
};

// The outcome of a scan: keep going, stop without a verdict (malformed
// bytes, left to the parser), or refuse.
enum class Scan { kOk, kStop, kRefuse };

Scan ScanTensor(CodedInputStream* in, const std::string& path, DimCounts* counts,
                absl::Status* refusal) {
  int64_t* dims = counts->For(path);
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->BytesUntilLimit() == 0 ? Scan::kOk : Scan::kStop;
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const WireFormatLite::WireType type = WireFormatLite::GetTagWireType(tag);
    if (number == kShapeField && type == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t dim = 0;
      if (!in->ReadVarint64(&dim)) return Scan::kStop;
      ++*dims;
    } else if (number == kShapeField && type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length)) return Scan::kStop;
      if (length > kMaxPackedShapeBytes) {
        *refusal = absl::InvalidArgumentError(absl::StrCat(
            path, ".shape: more than ", kMaxWireRank, " dims (a packed shape of ",
            length, " bytes); tensors have at most ", kMaxWireRank, " dims"));
        return Scan::kRefuse;
      }
      unsigned char packed[kMaxPackedShapeBytes];
      if (!in->ReadRaw(packed, static_cast<int>(length))) return Scan::kStop;
      // Every varint ends with the one byte of it below 0x80.
      for (uint32_t i = 0; i < length; ++i) *dims += packed[i] < 0x80 ? 1 : 0;
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return Scan::kStop;
    }
    if (*dims > kMaxWireRank) {
      *refusal = absl::InvalidArgumentError(absl::StrCat(
          path, ".shape: more than ", kMaxWireRank, " dims (", *dims,
          " read so far); tensors have at most ", kMaxWireRank, " dims"));
      return Scan::kRefuse;
    }
  }
}

Scan ScanMessage(CodedInputStream* in, const Descriptor* descriptor,
                 const std::string& prefix, int depth, DimCounts* counts,
                 absl::Status* refusal) {
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->BytesUntilLimit() <= 0 ? Scan::kOk : Scan::kStop;
    const FieldDescriptor* f =
        descriptor->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool descend =
        f != nullptr && depth < kMaxDepth &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        f->type() == FieldDescriptor::TYPE_MESSAGE &&
        ContainsTensor(f->message_type(), depth + 1);
    if (!descend) {
      if (!WireFormatLite::SkipField(in, tag)) return Scan::kStop;
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length) || length > INT32_MAX) return Scan::kStop;
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    const std::string path = prefix + f->name();
    const Scan scan =
        f->message_type() == v1::Tensor::descriptor()
            ? ScanTensor(in, path, counts, refusal)
            : ScanMessage(in, f->message_type(), path + ".", depth + 1, counts, refusal);
    if (scan != Scan::kOk) return scan;
    in->PopLimit(limit);
  }
}

}  // namespace

absl::Status CheckWireRanks(google::protobuf::io::ZeroCopyInputStream* bytes,
                            const Descriptor* descriptor) {
  CodedInputStream in(bytes);
  DimCounts counts;
  absl::Status refusal;
  ScanMessage(&in, descriptor, "", 0, &counts, &refusal);
  return refusal;
}

absl::Status CheckWireRanks(const grpc::ByteBuffer& bytes, const Descriptor* descriptor) {
  // The reader only reads the buffer, which gRPC owns.
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
  if (!reader.status().ok()) return absl::OkStatus();  // left to the parser
  return CheckWireRanks(&reader, descriptor);
}

}  // namespace conv1d
