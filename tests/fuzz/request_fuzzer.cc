// Fuzz target: a request's whole way through the frontend short of the
// backend — parsing (the rank check, the split parser at the input's
// threshold), validation against a registry holding two weight sets, the
// size limit, binding the response's outputs and serializing the response.
// Invariants: nothing crashes or overruns (ASan, UBSan); every refusal is
// INVALID_ARGUMENT (NOT_FOUND for an unknown weight set) with a message of
// bounded size that names a field; an accepted request has no tensor of more
// than 8 dims; a bound response serializes.
#include <cstdint>

#include "server/core/weight_registry.h"
#include "server/frontend/validation.h"
#include "server/frontend/wire_limits.h"
#include "tests/fuzz/fuzz_input.h"

namespace conv1d::fuzz {
namespace {

// Longest refusal message expected: a field path, a few numbers and shapes
// of at most 8 dims shown.
constexpr size_t kMaxMessageBytes = 512;

WeightRegistry* Registry() {
  static WeightRegistry* registry = [] {
    auto* r = new WeightRegistry();
    Check(r->Register("w", DType::kF32, 8, 4, std::string(8 * 4 * 4, '\x01'),
                      std::string(8 * 4, '\x02'), false)
              .ok(),
          "register w");
    Check(r->Register("h", DType::kF16, 4, 2, std::string(4 * 2 * 2, '\x01'), absl::nullopt,
                      false)
              .ok(),
          "register h");
    return r;
  }();
  return registry;
}

void CheckRefusal(const absl::Status& s) {
  Check(s.code() == absl::StatusCode::kInvalidArgument ||
            s.code() == absl::StatusCode::kNotFound,
        "refusal is neither INVALID_ARGUMENT nor NOT_FOUND");
  Check(s.message().size() <= kMaxMessageBytes, "refusal message too long");
  Check(!s.message().empty(), "refusal without a message");
}

template <typename Request, typename Response, typename Validate, typename Bind>
void Run(const Input& in, Validate validate, Bind bind) {
  Request request;
  DetachedTensors request_data;
  absl::Status s =
      ParseWithDetachedData(in.buffer, &request, in.min_bytes, HeapAllocator(), &request_data);
  if (!s.ok()) {
    CheckRefusal(s);
    return;
  }
  Check(MaxRank(request) <= kMaxWireRank, "parsed a tensor of more than 8 dims");
  ValidationLimits limits;
  limits.max_request_bytes = int64_t{1} << 20;
  ValidatedCall call;
  s = validate(request, *Registry(), limits, &call, &request_data);
  if (!s.ok()) {
    CheckRefusal(s);
    return;
  }
  s = CheckRequestSize(call, limits);
  if (!s.ok()) {
    CheckRefusal(s);
    return;
  }
  Check(call.total_bytes > 0 && call.total_bytes <= limits.max_request_bytes,
        "total_bytes outside the limit");
  Response response;
  DetachedTensors response_data;
  OutputBuffers outputs;
  outputs.min_bytes = in.min_bytes;
  outputs.allocate = HeapAllocator();
  outputs.detached = &response_data;
  bind(&call, &response, &outputs);
  grpc::ByteBuffer sent;
  Check(SerializeWithDetachedData(response, response_data, &sent).ok(),
        "a bound response does not serialize");
}

void RunRegister(const Input& in) {
  v1::RegisterWeightsRequest request;
  absl::Status s = ParseMessage(in.buffer, &request);
  if (!s.ok()) {
    CheckRefusal(s);
    return;
  }
  ValidationLimits limits;
  ValidatedWeights weights;
  s = ValidateRegisterWeights(request, limits, &weights);
  if (!s.ok()) CheckRefusal(s);
}

}  // namespace
}  // namespace conv1d::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  conv1d::fuzz::QuietProtobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conv1d;
  using namespace conv1d::fuzz;
  Input in;
  if (!Decode(data, size, &in)) return 0;
  switch (in.kind) {
    case MessageKind::kForward:
      Run<v1::ForwardRequest, v1::ForwardResponse>(
          in, ValidateForward,
          [](ValidatedCall* c, v1::ForwardResponse* r, const OutputBuffers* o) {
            BindForwardResponse(c, r, o);
          });
      break;
    case MessageKind::kBackward:
      Run<v1::BackwardRequest, v1::BackwardResponse>(
          in, ValidateBackward,
          [](ValidatedCall* c, v1::BackwardResponse* r, const OutputBuffers* o) {
            BindBackwardResponse(c, r, o);
          });
      break;
    case MessageKind::kUpdate:
      Run<v1::UpdateRequest, v1::UpdateResponse>(
          in, ValidateUpdate,
          [](ValidatedCall* c, v1::UpdateResponse* r, const OutputBuffers* o) {
            BindUpdateResponse(c, r, o);
          });
      break;
    case MessageKind::kRegister:
      RunRegister(in);
      break;
  }
  return 0;
}
