#include "client/tensor_view.h"

#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/host_tensor.h"

namespace conv1d::client {

namespace {

int64_t Product(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status CheckShape(absl::Span<const int64_t> shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has a negative dimension"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

TensorView::TensorView(const float* data, absl::Span<const int64_t> shape)
    : dtype_(DType::kF32),
      shape_(shape.begin(), shape.end()),
      bytes_(reinterpret_cast<const uint8_t*>(data), Product(shape) * sizeof(float)) {}

TensorView::TensorView(const uint16_t* data, absl::Span<const int64_t> shape, DType dtype)
    : dtype_(dtype),
      shape_(shape.begin(), shape.end()),
      bytes_(reinterpret_cast<const uint8_t*>(data), Product(shape) * sizeof(uint16_t)) {
  assert(dtype == DType::kF16 || dtype == DType::kBF16);
}

absl::StatusOr<TensorView> TensorView::FromBytes(DType dtype, absl::Span<const int64_t> shape,
                                                 absl::Span<const uint8_t> bytes) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  const int64_t want = Product(shape) * DTypeSize(dtype);
  if (want != static_cast<int64_t>(bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        DTypeName(dtype), "[", absl::StrJoin(shape, ","), "] takes ", want, " bytes, got ",
        bytes.size()));
  }
  TensorView v;
  v.dtype_ = dtype;
  v.shape_.assign(shape.begin(), shape.end());
  v.bytes_ = bytes;
  return v;
}

absl::StatusOr<TensorView> TensorView::FromProto(const v1::Tensor& t) {
  // Built in place: moving an empty InlinedVector draws a false
  // -Wmaybe-uninitialized from GCC 12.
  if (t.shape().empty() && t.data().empty()) {
    return absl::StatusOr<TensorView>(absl::in_place);
  }
  absl::StatusOr<DType> dtype = FromWireDType(t.dtype());
  if (!dtype.ok()) return dtype.status();
  return FromBytes(*dtype, absl::MakeConstSpan(t.shape().data(), t.shape().size()),
                   absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(t.data().data()),
                                       t.data().size()));
}

int64_t TensorView::num_elements() const { return Product(shape_); }

void TensorView::ToProto(v1::Tensor* t) const {
  t->set_dtype(ToWireDType(dtype_));
  t->clear_shape();
  for (int64_t d : shape_) t->add_shape(d);
  t->set_data(bytes_.data(), bytes_.size());
}

v1::Tensor TensorView::ToProto() const {
  v1::Tensor t;
  ToProto(&t);
  return t;
}

std::vector<float> TensorView::ToFloats() const {
  // Borrowed bytes need not be aligned for their dtype: load through memcpy.
  const int64_t size = DTypeSize(dtype_);
  const int64_t n = num_bytes() / size;
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype_ == DType::kF32) {
      std::memcpy(&out[i], bytes_.data() + i * size, sizeof(float));
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes_.data() + i * size, sizeof bits);
      out[i] = LoadAsFloat(&bits, dtype_, 0);
    }
  }
  return out;
}

std::string TensorView::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(shape_, ","), "]");
}

}  // namespace conv1d::client
