#include "server/backends/echo/echo_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

constexpr int kMaxLanes = 1024;

// Copies the first bytes of `in` (if present) into `out` and zero-fills the
// rest, so every requested output byte is written.
void CopyOrZero(const OutputView& out, const TensorView* in) {
  if (!out.present() || out.bytes <= 0) return;
  auto* dst = static_cast<char*>(out.data);
  int64_t copied_bytes = 0;
  if (in != nullptr && in->present() && in->bytes > 0) {
    copied_bytes = std::min(out.bytes, in->bytes);
    if (dst != in->data) std::memcpy(dst, in->data, static_cast<size_t>(copied_bytes));
  }
  if (copied_bytes < out.bytes) {
    std::memset(dst + copied_bytes, 0, static_cast<size_t>(out.bytes - copied_bytes));
  }
}

const TensorView* FirstPresent(const TensorView& a, const TensorView& b) {
  if (a.present()) return &a;
  if (b.present()) return &b;
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EchoBackend>> EchoBackend::Create(
    EchoBackendOptions options) {
  if (options.lanes < 1 || options.lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EchoBackendOptions.lanes must be in [1, ", kMaxLanes, "], got ",
        options.lanes));
  }
  return std::unique_ptr<EchoBackend>(new EchoBackend(options.lanes));
}

void EchoBackend::EchoSegment(const ConvSegment& s) {
  CopyOrZero(s.y, &s.x);
  CopyOrZero(s.dx, FirstPresent(s.dout, s.x));
  CopyOrZero(s.conv_state_out, &s.conv_state);
  CopyOrZero(s.final_states, &s.initial_states);
  CopyOrZero(s.dinitial_states, FirstPresent(s.dfinal_states, s.initial_states));
  CopyOrZero(s.dweight, &s.weight);
  CopyOrZero(s.dbias, &s.bias);
}

absl::Status EchoBackend::RunBatch(int lane, const BatchKey& key,
                                   absl::Span<ConvSegment* const> segments,
                                   BatchStats* stats) {
  if (lane < 0 || lane >= lanes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("lane ", lane, " out of range [0, ", lanes_, ")"));
  }
  const auto start = std::chrono::steady_clock::now();
  for (ConvSegment* segment : segments) {
    if (segment != nullptr) EchoSegment(*segment);
  }
  if (stats != nullptr) {
    stats->compute_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats->launches += 1;
  }
  return absl::OkStatus();
}

}  // namespace conv1d
