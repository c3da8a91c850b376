// Differential fuzz target: the split parser (ParseWithDetachedData with a
// detach threshold, as with --host_tensors=always) against protobuf's own
// parser on the same bytes. They must agree exactly: the split parser
// accepts a message if and only if protobuf does and no Tensor in it has
// more than kMaxWireRank dims (refused INVALID_ARGUMENT naming the shape),
// and then yields the same fields, detached data included. The ordinary
// path (threshold -1) is held to the same.
#include <cstdint>

#include "absl/strings/match.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/frontend/wire_limits.h"
#include "tests/fuzz/fuzz_input.h"

namespace conv1d::fuzz {
namespace {

template <typename Request>
void Compare(const Input& in) {
  Request reference;
  const bool protobuf_ok =
      reference.ParseFromArray(in.message.data(), static_cast<int>(in.message.size()));
  const bool rank_ok = !protobuf_ok || MaxRank(reference) <= kMaxWireRank;
  for (int64_t min_bytes : {int64_t{-1}, in.min_bytes < 0 ? int64_t{0} : in.min_bytes}) {
    Request got;
    DetachedTensors detached;
    const absl::Status s =
        ParseWithDetachedData(in.buffer, &got, min_bytes, HeapAllocator(), &detached);
    if (protobuf_ok && !rank_ok) {
      Check(!s.ok() && absl::StrContains(s.message(), ".shape: more than"),
            "a tensor of more than 8 dims was not refused by its rank");
      continue;
    }
    Check(s.ok() == protobuf_ok, "accepts what protobuf refuses, or the reverse");
    if (!s.ok()) {
      Check(s.code() == absl::StatusCode::kInvalidArgument, "refusal is not INVALID_ARGUMENT");
      continue;
    }
    Check(min_bytes >= 0 || detached.empty(), "detached with a threshold of -1");
    Reattach(detached, got);
    Check(google::protobuf::util::MessageDifferencer::Equals(reference, got),
          "fields differ from protobuf's");
  }
}

}  // namespace
}  // namespace conv1d::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  conv1d::fuzz::QuietProtobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conv1d::fuzz;
  Input in;
  if (!Decode(data, size, &in)) return 0;
  switch (in.kind) {
    case MessageKind::kForward: Compare<conv1d::v1::ForwardRequest>(in); break;
    case MessageKind::kBackward: Compare<conv1d::v1::BackwardRequest>(in); break;
    case MessageKind::kUpdate: Compare<conv1d::v1::UpdateRequest>(in); break;
    case MessageKind::kRegister: Compare<conv1d::v1::RegisterWeightsRequest>(in); break;
  }
  return 0;
}
