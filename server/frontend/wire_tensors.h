// Tensor bytes that travel outside protobuf strings.
//
// A compute request's large tensors (conv1d.v1.Tensor fields at the top level
// of the message, `data` of at least a threshold) are received straight into
// memory from the server's HostBufferProvider (server/core/host_buffers.h):
// ParseWithDetachedData copies them
// once from gRPC's receive buffers into that memory and parses the rest of
// the message normally, leaving those tensors' `data` empty. The GPU
// backend's buffers are page-locked, so the bytes then reach the device by
// DMA with no staging memcpy.
//
// Responses go the other way: the frontend binds large outputs to host
// buffers, the backend writes them there, and SerializeWithDetachedData
// sends them as gRPC slices that point at those buffers (no copy into a
// protobuf string or into the send buffer); the slices hold a reference that
// keeps each buffer alive until gRPC has sent it.
//
// The bytes on the wire are ordinary protobuf: clients see no difference.
//
// Thread-safety: free functions; a DetachedTensors is not synchronized and
// belongs to one call.
#ifndef CONV1D_SERVER_FRONTEND_WIRE_TENSORS_H_
#define CONV1D_SERVER_FRONTEND_WIRE_TENSORS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "conv1d/v1/conv1d.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/core/host_buffers.h"

namespace conv1d {

// When request tensors go to host buffers: kAuto when the provider's memory
// is page-locked (HostBufferProvider::page_locked); kAlways for any provider
// (heap memory then); kNever.
enum class HostTensors { kAuto, kAlways, kNever };

// Host memory of at least the given number of bytes (> 0), and its kind;
// never null.
using HostAllocator = std::function<HostBuffer(int64_t bytes)>;

// The `data` bytes of some conv1d.v1.Tensor messages, kept outside them.
class DetachedTensors {
 public:
  struct Entry {
    const v1::Tensor* tensor = nullptr;  // the message whose data this is
    std::shared_ptr<void> buffer;
    int64_t bytes = 0;
    // Where `buffer` is: the heap, the backend's host pool, a client's
    // shared-memory region (views built from the entry carry it).
    Placement where;
  };

  // REQUIRES (both): `tensor` has no entry yet and its own `data` is empty.
  void Add(const v1::Tensor* tensor, HostBuffer buffer, int64_t bytes);
  // Bytes elsewhere than a host buffer (a shared-memory region).
  void Add(const v1::Tensor* tensor, std::shared_ptr<void> data, int64_t bytes,
           Placement where);
  // The entry of `tensor`, or null when its data is its own.
  const Entry* Find(const v1::Tensor* tensor) const;
  bool empty() const { return entries_.empty(); }
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  std::vector<Entry> entries_;  // a handful at most: linear search
};

// Both parsers first refuse a message with a Tensor of more than
// kMaxWireRank dims from its raw bytes (wire_limits.h: INVALID_ARGUMENT
// naming the shape), so no shape is expanded into int64s beyond that.

// Parses `bytes` into `message` the ordinary way; INVALID_ARGUMENT naming
// the message type when they do not parse.
absl::Status ParseMessage(const grpc::ByteBuffer& bytes,
                          google::protobuf::Message* message);

// Parses `bytes` into `message`. Top-level conv1d.v1.Tensor fields whose data
// has at least `min_bytes` bytes (min_bytes >= 0) get it in memory from
// `allocate`, recorded in `detached`; min_bytes < 0 detaches nothing.
// Unusual encodings (a Tensor field or its data repeated, which protobuf
// merges; groups) are parsed the ordinary way, so the result always equals
// what ParseFromZeroCopyStream gives, with data moved: tags and lengths are
// read by the rules of protobuf's parser (at most 5 bytes; not those of the
// more lenient CodedInputStream::ReadTag), and everything kept in the
// message is passed to protobuf exactly as received, so the same bytes are
// refused. INVALID_ARGUMENT when the bytes do not parse.
absl::Status ParseWithDetachedData(const grpc::ByteBuffer& bytes,
                                   google::protobuf::Message* message,
                                   int64_t min_bytes, const HostAllocator& allocate,
                                   DetachedTensors* detached);

// Serializes `message` into `out`, with each top-level Tensor listed in
// `detached` carrying that entry's bytes as its data (its own data must be
// empty). INTERNAL when serialization fails.
absl::Status SerializeWithDetachedData(const google::protobuf::Message& message,
                                       const DetachedTensors& detached,
                                       grpc::ByteBuffer* out);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_WIRE_TENSORS_H_
