#include "client/host_tensor.h"

#include <cassert>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conv1d {

namespace {
uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

FastRng::FastRng(uint64_t seed) {
  s_[0] = SplitMix(seed);
  s_[1] = SplitMix(seed);
  if (s_[0] == 0 && s_[1] == 0) s_[1] = 1;
}

uint64_t FastRng::Next() {  // xorshift128+
  uint64_t s1 = s_[0];
  const uint64_t s0 = s_[1];
  const uint64_t result = s0 + s1;
  s_[0] = s0;
  s1 ^= s1 << 23;
  s_[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
  return result;
}

float FastRng::Uniform(float lo, float hi) {
  const float u = static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

double FastRng::UniformDouble() {
  return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor HostTensor::FromFloats(DType dtype, std::vector<int64_t> shape,
                                  absl::Span<const float> values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    StoreFromFloat(t.data.data(), dtype, static_cast<int64_t>(i), values[i]);
  }
  return t;
}

std::vector<float> HostTensor::ToFloats() const {
  const int64_t n = num_bytes() / DTypeSize(dtype);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = LoadAsFloat(data.data(), dtype, i);
  return out;
}

std::vector<double> HostTensor::ToDoubles() const {
  const int64_t n = num_bytes() / DTypeSize(dtype);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = LoadAsFloat(data.data(), dtype, i);
  return out;
}

HostTensor HostTensor::CastTo(DType to) const {
  if (to == dtype) return *this;
  std::vector<float> v = ToFloats();
  return FromFloats(to, shape, v);
}

HostTensor HostTensor::Random(DType dtype, std::vector<int64_t> shape,
                              uint64_t seed, float lo, float hi) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const int64_t n = t.num_elements();
  t.data.resize(n * DTypeSize(dtype));
  FastRng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    StoreFromFloat(t.data.data(), dtype, i, rng.Uniform(lo, hi));
  }
  return t;
}

client::TensorView HostTensor::view() const& {
  if (empty()) return client::TensorView();
  absl::StatusOr<client::TensorView> v = client::TensorView::FromBytes(
      dtype, shape,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  // Bytes that do not match dtype and shape break HostTensor's contract.
  assert(v.ok());
  return v.ok() ? *std::move(v) : client::TensorView();
}

HostTensor HostTensor::FromView(const client::TensorView& v) {
  HostTensor t;
  t.dtype = v.dtype();
  t.shape.assign(v.shape().begin(), v.shape().end());
  t.data.assign(reinterpret_cast<const char*>(v.bytes().data()), v.bytes().size());
  return t;
}

absl::StatusOr<HostTensor> HostTensor::FromProto(const v1::Tensor& p) {
  HostTensor t;
  absl::StatusOr<DType> dt = FromWireDType(p.dtype());
  if (!dt.ok()) return dt.status();
  t.dtype = *dt;
  t.shape.assign(p.shape().begin(), p.shape().end());
  for (int64_t d : t.shape) {
    if (d < 0) return absl::InvalidArgumentError("tensor has a negative dimension");
  }
  const int64_t want = t.num_elements() * DTypeSize(t.dtype);
  if (want != static_cast<int64_t>(p.data().size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", t.DebugString(), " should have ", want,
                     " bytes, has ", p.data().size()));
  }
  t.data = p.data();
  return t;
}

void HostTensor::ToProto(v1::Tensor* p) const {
  p->set_dtype(ToWireDType(dtype));
  p->clear_shape();
  for (int64_t d : shape) p->add_shape(d);
  p->set_data(data);
}

v1::Tensor HostTensor::ToProto() const {
  v1::Tensor p;
  ToProto(&p);
  return p;
}

std::string HostTensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

double HostTensor::Checksum() const {
  const int64_t n = num_bytes() / DTypeSize(dtype);
  double sum = 0, abs_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = LoadAsFloat(data.data(), dtype, i);
    sum += v * (1.0 + static_cast<double>(i % 7));
    abs_sum += std::fabs(v);
  }
  return sum + abs_sum;
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "fp32" || n == "f32" || n == "float32") return DType::kF32;
  if (n == "fp16" || n == "f16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (want fp32, fp16 or bf16)"));
}

v1::DType ToWireDType(DType t) {
  switch (t) {
    case DType::kF32: return v1::FP32;
    case DType::kF16: return v1::FP16;
    case DType::kBF16: return v1::BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<DType> FromWireDType(v1::DType t) {
  switch (t) {
    case v1::FP32: return DType::kF32;
    case v1::FP16: return DType::kF16;
    case v1::BF16: return DType::kBF16;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown wire dtype ", static_cast<int>(t)));
}

}  // namespace conv1d
