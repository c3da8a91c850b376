// TensorView: a typed, non-owning view of a tensor in host memory — dtype,
// shape and the little-endian bytes of the values, row-major in that shape —
// the form in which the client library takes an application's arrays without
// copying them into an owned HostTensor first. It is also how a response's
// tensors are read without a copy (FromProto).
//
// The bytes are borrowed: the memory a view points at must stay alive and
// unchanged while the view is used. The shape is copied into the view, so a
// temporary shape list is fine. Building a request (ToProto, or the typed
// calls of conv1d_client.h) copies the bytes into the message once.
//
// In namespace conv1d::client because the server core has a TensorView of
// its own (server/core/tensor.h, conv1d::TensorView), and the client's answer
// checking links both.
//
// Used by applications, by HostTensor (view()) and by the typed calls. A view
// is a small value: copy it freely; reading it from several threads is safe.
#ifndef CONV1D_CLIENT_TENSOR_VIEW_H_
#define CONV1D_CLIENT_TENSOR_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "conv1d/v1/conv1d.pb.h"
#include "server/core/dtype.h"

namespace conv1d::client {

class TensorView {
 public:
  // No tensor: an optional request tensor that is left out.
  TensorView() = default;

  // fp32 values.
  // REQUIRES: every dim >= 0; `data` holds product(shape) floats.
  TensorView(const float* data, absl::Span<const int64_t> shape);
  // fp16 or bf16 values as their raw 16-bit patterns (bf16: the upper half of
  // the fp32 bit pattern).
  // REQUIRES: dtype is kF16 or kBF16; every dim >= 0; `data` holds
  // product(shape) values.
  TensorView(const uint16_t* data, absl::Span<const int64_t> shape, DType dtype);

  // Any dtype over raw bytes. INVALID_ARGUMENT when a dim is negative or the
  // byte count is not product(shape) * DTypeSize(dtype).
  static absl::StatusOr<TensorView> FromBytes(DType dtype, absl::Span<const int64_t> shape,
                                              absl::Span<const uint8_t> bytes);
  // A view of a wire tensor, e.g. one of a response; valid while `t` lives
  // and is not modified. INVALID_ARGUMENT for an unknown dtype, a negative
  // dim or a byte count that does not match. An absent tensor (no shape, no
  // data) gives an empty view.
  static absl::StatusOr<TensorView> FromProto(const v1::Tensor& t);

  DType dtype() const { return dtype_; }
  absl::Span<const int64_t> shape() const { return shape_; }
  absl::Span<const uint8_t> bytes() const { return bytes_; }
  int64_t num_elements() const;
  int64_t num_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  // True for the default view (and a view of an absent wire tensor).
  bool empty() const { return shape_.empty() && bytes_.empty(); }

  // Copies dtype, shape and bytes into the message.
  void ToProto(v1::Tensor* t) const;
  v1::Tensor ToProto() const;
  // The values widened to float (fp16/bf16 exactly), e.g. to compare.
  std::vector<float> ToFloats() const;
  // "bf16[1,2048,128]"
  std::string DebugString() const;

 private:
  DType dtype_ = DType::kF32;
  absl::InlinedVector<int64_t, 4> shape_;
  absl::Span<const uint8_t> bytes_;
};

}  // namespace conv1d::client

#endif  // CONV1D_CLIENT_TENSOR_VIEW_H_
