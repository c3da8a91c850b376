// Non-owning views of tensor payloads used throughout the core.
//
// A TensorView points at bytes owned by someone else (a received gRPC
// message, a registered weight set, later a client's shared-memory region);
// `owner` keeps that storage alive when the view outlives its creator.
// OutputView points at caller-provided storage the backend writes into (for
// the gRPC frontend: the response message's bytes). Views are plain values;
// the bytes they point to follow the owner's thread-safety rules (inputs are
// read-only once a task is submitted; each output has exactly one writer).
#ifndef CONV1D_SERVER_CORE_TENSOR_H_
#define CONV1D_SERVER_CORE_TENSOR_H_

#include <cstdint>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "server/core/dtype.h"

namespace conv1d {

using Shape = absl::InlinedVector<int64_t, 4>;

// Product of the dimensions; 1 for a scalar. REQUIRES: every dim >= 0 and the
// product fits in int64 (validation checks this before a view is built).
int64_t NumElements(absl::Span<const int64_t> shape);

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;  // null means "absent" for optional tensors
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;  // may be null when lifetime is external
  // Non-zero when the bytes are immutable for as long as `owner` lives and
  // are known by this id across requests (registered weight sets). Backends
  // may keep device copies keyed by it; ids are never reused.
  uint64_t cache_id = 0;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const { return NumElements(shape); }
};

struct OutputView {
  DType dtype = DType::kF32;
  Shape shape;
  void* data = nullptr;  // null means "not requested"
  int64_t bytes = 0;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const { return NumElements(shape); }
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_TENSOR_H_
