#include "server/backends/cpu/cpu_backend.h"

#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/core/segment_check.h"

namespace conv1d {
namespace {

constexpr int kMaxLanes = 1024;
// Segments moving fewer bytes than this run whole on one thread: splitting
// them across the pool costs more in hand-offs than it gains.
constexpr int64_t kSmallSegmentBytes = 256 * 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(CpuBackendOptions options) {
  if (options.lanes < 1 || options.lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuBackendOptions.lanes must be in [1, ", kMaxLanes, "], got ", options.lanes));
  }
  absl::StatusOr<std::unique_ptr<ThreadPool>> pool =
      ThreadPool::Create(ThreadPoolOptions{.threads = options.threads});
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<CpuBackend>(new CpuBackend(*std::move(pool), options.lanes));
}

std::vector<std::string> CpuBackend::devices() const {
  return {absl::StrCat("cpu (", pool_->num_threads(), " threads)")};
}

absl::Status CpuBackend::RunBatch(int lane, const BatchKey& key,
                                  absl::Span<ConvSegment* const> segments,
                                  BatchStats* stats) {
  if (lane < 0 || lane >= lanes_) {
    return absl::InvalidArgumentError(absl::StrCat("lane ", lane, " out of range [0, ", lanes_, ")"));
  }
  const auto start = std::chrono::steady_clock::now();
  // Validate everything first so that a bad segment fails the batch before
  // any output is written.
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", i, " is null"));
    }
    if (absl::Status st = ValidateSegment(key, *segments[i]); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", i, ": ", st.message()));
    }
  }
  std::vector<ConvSegment*> small;
  int32_t passes = 0;
  for (ConvSegment* s : segments) {
    if (s->bytes_moved() < kSmallSegmentBytes) {
      small.push_back(s);
      continue;
    }
    if (absl::Status st = CpuConvValidSegment(key, *s, pool_.get()); !st.ok()) return st;
    ++passes;
  }
  if (!small.empty()) {
    std::vector<absl::Status> results(small.size());
    pool_->ParallelFor(static_cast<int64_t>(small.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        results[i] = CpuConvValidSegment(key, *small[i], /*pool=*/nullptr);
      }
    });
    ++passes;
    for (const absl::Status& st : results) {
      if (!st.ok()) return st;
    }
  }
  if (stats != nullptr) {
    stats->compute_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats->launches += passes;
  }
  return absl::OkStatus();
}

}  // namespace conv1d
