// Shared by the libFuzzer targets in tests/fuzz: how an input's bytes become
// a request (its first byte picks the message type, the detach threshold and
// where the received buffer is cut into slices), heap host buffers, the
// largest tensor rank in a parsed message, and putting detached data back
// into the message it came from.
//
// Not thread-safe (libFuzzer runs one input at a time per process).
#ifndef CONV1D_TESTS_FUZZ_FUZZ_INPUT_H_
#define CONV1D_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "conv1d/v1/conv1d.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d::fuzz {

// Aborts (a finding) with `what` when `ok` is false.
inline void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

// Protobuf logs every string field that is not UTF-8; fuzzing makes many.
inline void QuietProtobuf() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
}

enum class MessageKind { kForward = 0, kBackward = 1, kUpdate = 2, kRegister = 3 };

struct Input {
  MessageKind kind = MessageKind::kForward;
  int64_t min_bytes = -1;  // -1, 0, 16 or 512
  std::string message;     // the request's bytes
  grpc::ByteBuffer buffer;  // the same bytes as gRPC might hand them over
};

// False when there are no bytes at all. Byte 0: bits 0-1 the kind, bits 2-3
// the threshold, bits 4-7 a cut: the message is received as one slice, or
// cut at that offset and at every 7th byte past it.
inline bool Decode(const uint8_t* data, size_t size, Input* in) {
  if (size < 1) return false;
  const uint8_t head = data[0];
  in->kind = static_cast<MessageKind>(head & 3);
  constexpr int64_t kThresholds[] = {-1, 0, 16, 512};
  in->min_bytes = kThresholds[(head >> 2) & 3];
  in->message.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = head >> 4;
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  if (cut != 0) {
    for (size_t next = cut; next < in->message.size(); next += 7) {
      slices.emplace_back(in->message.data() + at, next - at);
      at = next;
    }
  }
  if (at < in->message.size() || slices.empty()) {
    slices.emplace_back(in->message.data() + at, in->message.size() - at);
  }
  in->buffer = grpc::ByteBuffer(slices.data(), slices.size());
  return true;
}

inline HostAllocator HeapAllocator() {
  return [](int64_t bytes) {
    return std::shared_ptr<void>(::operator new(static_cast<size_t>(bytes)),
                                 [](void* p) { ::operator delete(p); });
  };
}

// The most dims of any Tensor set in `m`, at any depth.
inline int MaxRank(const google::protobuf::Message& m) {
  if (const auto* t = google::protobuf::DynamicCastToGenerated<v1::Tensor>(&m)) {
    return t->shape_size();
  }
  int rank = 0;
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) {
      continue;
    }
    rank = std::max(rank, MaxRank(m.GetReflection()->GetMessage(m, f)));
  }
  return rank;
}

// Puts each detached entry's bytes back as its tensor's data.
inline void Reattach(const DetachedTensors& detached, const google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->message_type() != v1::Tensor::descriptor() ||
        !m.GetReflection()->HasField(m, f)) {
      continue;
    }
    const auto& t = static_cast<const v1::Tensor&>(m.GetReflection()->GetMessage(m, f));
    if (const DetachedTensors::Entry* e = detached.Find(&t); e != nullptr) {
      Check(t.data().empty(), "a detached tensor also has inline data");
      const_cast<v1::Tensor&>(t).set_data(
          std::string(static_cast<const char*>(e->buffer.get()), static_cast<size_t>(e->bytes)));
    }
  }
}

}  // namespace conv1d::fuzz

#endif  // CONV1D_TESTS_FUZZ_FUZZ_INPUT_H_
