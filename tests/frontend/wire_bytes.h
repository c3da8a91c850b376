// Hand-built protobuf wire bytes and the large forward case shared by the
// wire-tensor unit tests (tests/frontend/wire_tensors_test.cc) and their
// end-to-end counterparts (tests/e2e/wire_tensors_e2e_test.cc).
//
// Header-only; pure functions, safe from any thread.
#ifndef CONV1D_TESTS_FRONTEND_WIRE_BYTES_H_
#define CONV1D_TESTS_FRONTEND_WIRE_BYTES_H_

#include <cstdint>
#include <string>

#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {

// ServerOptions' default host_tensor_min_bytes.
inline constexpr int64_t kDefaultMin = int64_t{4} << 10;

// `v` as a protobuf base-128 varint.
inline std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}

// `v` as exactly `n` varint bytes (n at least its shortest encoding): the
// longer encodings pad with continuation bytes.
inline std::string PaddedVarint(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const uint64_t part = 7 * i < 64 ? (v >> (7 * i)) & 0x7f : 0;
    s.push_back(static_cast<char>(part | (i + 1 < n ? 0x80 : 0)));
  }
  return s;
}

// Field `number` as length-delimited `payload`.
inline std::string Delimited(int number, const std::string& payload) {
  return Varint((static_cast<uint64_t>(number) << 3) | 2) + Varint(payload.size()) + payload;
}

// A forward case whose activations are above kDefaultMin.
inline Case LargeForwardCase(DType dtype) {
  Case c;
  c.op = Op::kForward;
  c.x_dtype = c.w_dtype = dtype;
  c.batch = 2;
  c.dim = 64;
  c.seqlen = 300;
  c.width = 4;
  c.bias = c.initial_states = c.final_states = true;
  return c;
}

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_FRONTEND_WIRE_BYTES_H_
