// HostTensor: an owned, typed tensor in host memory as the client sees it
// (dtype, shape, little-endian bytes), with conversions to and from float
// vectors (fp16/bf16 rounded to nearest even), the wire Tensor message, and
// seeded random fills.
//
// Used by the client library, the command-line client and the load
// generator; view() lends it where a client::TensorView is taken. A HostTensor is a plain value: not synchronised; share it
// read-only or copy it.
#ifndef CONV1D_CLIENT_HOST_TENSOR_H_
#define CONV1D_CLIENT_HOST_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/tensor_view.h"
#include "conv1d/v1/conv1d.pb.h"
#include "server/core/dtype.h"

namespace conv1d {

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string data;  // product(shape) * DTypeSize(dtype) bytes

  int64_t num_elements() const;
  int64_t num_bytes() const { return static_cast<int64_t>(data.size()); }
  bool empty() const { return shape.empty() && data.empty(); }

  // Values rounded to `dtype`.
  static HostTensor FromFloats(DType dtype, std::vector<int64_t> shape,
                               absl::Span<const float> values);
  std::vector<float> ToFloats() const;
  std::vector<double> ToDoubles() const;
  // The same values in another dtype (rounded when narrowing).
  HostTensor CastTo(DType to) const;

  // Uniform values in [lo, hi), reproducible from `seed`.
  static HostTensor Random(DType dtype, std::vector<int64_t> shape,
                           uint64_t seed, float lo = -1.f, float hi = 1.f);

  // A view of this tensor's bytes, valid while it lives unchanged. Not
  // available on a temporary, whose view would dangle at once.
  client::TensorView view() const&;
  client::TensorView view() && = delete;
  // An owned copy of what `v` shows.
  static HostTensor FromView(const client::TensorView& v);

  // Fails when the byte count does not match dtype and shape.
  static absl::StatusOr<HostTensor> FromProto(const v1::Tensor& t);
  void ToProto(v1::Tensor* t) const;
  v1::Tensor ToProto() const;

  // "fp32[1,2048,128]"
  std::string DebugString() const;
  // A dtype-independent digest of the values (sum and sum of |v|), printed by
  // the CLI so two runs can be compared by eye.
  double Checksum() const;
};

absl::StatusOr<DType> ParseDType(absl::string_view name);  // fp32|fp16|bf16
v1::DType ToWireDType(DType t);
absl::StatusOr<DType> FromWireDType(v1::DType t);

// Fast deterministic generator for random payloads (splitmix64 seeded
// xoshiro-style); not for cryptography.
class FastRng {
 public:
  explicit FastRng(uint64_t seed);
  uint64_t Next();
  float Uniform(float lo, float hi);  // [lo, hi)
  double UniformDouble();             // [0, 1)

 private:
  uint64_t s_[2];
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_HOST_TENSOR_H_
