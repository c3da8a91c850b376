// Tensor bytes of the inference protocol's ModelInfer that travel outside
// protobuf strings, as wire_tensors.h does for conv1d.v1.
//
// ParseInferRequest receives each raw_input_contents entry of at least a
// threshold straight into host memory from the server's HostBufferProvider
// (the backend's page-locked pool on a GPU host: one copy from gRPC's
// receive buffers, then DMA without staging) and parses the rest normally,
// leaving those entries empty in the message. SerializeInferResponse sends
// raw_output_contents entries that the backend wrote into host buffers as
// gRPC slices pointing at them (no copy); the slices keep the buffers alive
// until sent. The bytes on the wire are ordinary protobuf.
//
// Used by OipService::ModelInfer. Free functions; the buffer lists are not
// synchronized and belong to one call.
#ifndef CONV1D_SERVER_FRONTEND_OIP_WIRE_H_
#define CONV1D_SERVER_FRONTEND_OIP_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/core/host_buffers.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

// Raw contents kept outside the message, by raw_*_contents index; an entry
// with null `data` is in the message itself.
struct RawBuffers {
  std::vector<HostBuffer> buffers;
  std::vector<int64_t> bytes;

  const HostBuffer* Find(int index) const {
    return index < static_cast<int>(buffers.size()) && buffers[index].data != nullptr
               ? &buffers[index]
               : nullptr;
  }
};

// Parses `bytes` into *request; raw_input_contents entries of at least
// `min_bytes` (>= 0; < 0: none) go to memory from `allocate`, recorded in
// *raw. Unusual encodings parse the ordinary way. INVALID_ARGUMENT when the
// bytes do not parse.
absl::Status ParseInferRequest(const grpc::ByteBuffer& bytes, int64_t min_bytes,
                               const HostAllocator& allocate,
                               inference::ModelInferRequest* request, RawBuffers* raw);

// Serializes *response into *out, with raw_output_contents entry i taken
// from raw.buffers[i] where that is set (its message entry must be empty).
// Leaves response->raw_output_contents empty. INTERNAL when serialization
// fails.
absl::Status SerializeInferResponse(inference::ModelInferResponse* response,
                                    const RawBuffers& raw, grpc::ByteBuffer* out);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_WIRE_H_
