// Bounds checked on a request's raw bytes before protobuf parses them.
//
// Protobuf turns each element of a packed `repeated int64 shape` into 8 bytes
// however short it was on the wire, so a Tensor whose shape has millions of
// one-byte dims would take about eight times its size in memory before
// validation could refuse it. CheckWireRanks reads the bytes once, without
// copying or allocating anything sized by them, and refuses any Tensor with
// more than kMaxWireRank dims: INVALID_ARGUMENT naming the field (for
// example "inline_weights.weight.shape"), in a message of bounded size.
//
// It follows protobuf's rules for what is a field, so that it refuses a
// message exactly when protobuf would parse it into one with a Tensor of
// more than kMaxWireRank dims: a Tensor sent more than once is merged by
// protobuf, so the dims of every occurrence count; a member of a oneof
// clears the others; a field with an unexpected wire type is an unknown
// field and is not counted.
// Bytes that are not valid protobuf are left for the parser to refuse (the
// check says OK). A packed shape is counted without being read when it is
// longer than kMaxWireRank 10-byte varints: it holds more dims than that or
// does not parse.
//
// Used by wire_tensors.cc before every request parse, and by the fuzz
// targets. Pure function; thread-safe.
#ifndef CONV1D_SERVER_FRONTEND_WIRE_LIMITS_H_
#define CONV1D_SERVER_FRONTEND_WIRE_LIMITS_H_

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "grpcpp/support/byte_buffer.h"

namespace conv1d {

// Tensors of the wire API have rank 1..3; 8 leaves room for later ops and
// bounds the shape's memory at 64 bytes.
inline constexpr int kMaxWireRank = 8;

// OK, or INVALID_ARGUMENT "<field>.shape: more than 8 dims ..." for the
// first Tensor (at any depth of `descriptor`'s messages) with too many dims.
absl::Status CheckWireRanks(google::protobuf::io::ZeroCopyInputStream* bytes,
                            const google::protobuf::Descriptor* descriptor);
absl::Status CheckWireRanks(const grpc::ByteBuffer& bytes,
                            const google::protobuf::Descriptor* descriptor);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_WIRE_LIMITS_H_
