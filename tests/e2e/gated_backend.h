// GatedBackend: echo compute behind a gate, for end-to-end tests that need
// requests held in flight at a known point. RunBatch blocks until Open();
// AwaitEntered(n) waits until n batches have reached it.
//
// Used by tests/e2e only. Thread-safe: RunBatch runs on the scheduler's lanes
// while the test thread opens the gate and waits.
#ifndef CONV1D_TESTS_E2E_GATED_BACKEND_H_
#define CONV1D_TESTS_E2E_GATED_BACKEND_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backends/echo/echo_backend.h"
#include "server/core/backend.h"

namespace conv1d::e2e {

class GatedBackend final : public Backend {
 public:
  explicit GatedBackend(int lanes) : lanes_(lanes) {}
  const char* name() const override { return "gated-echo"; }
  std::vector<std::string> devices() const override { return {"gate"}; }
  int num_lanes() const override { return lanes_; }
  absl::Status RunBatch(int lane, const BatchKey& key,
                        absl::Span<ConvSegment* const> segments,
                        BatchStats* stats) override {
    absl::MutexLock lock(&mu_);
    ++entered_;
    mu_.Await(absl::Condition(&open_));
    for (ConvSegment* s : segments) EchoBackend::EchoSegment(*s);
    return absl::OkStatus();
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits (up to 10 s) until `n` batches have entered RunBatch.
  bool AwaitEntered(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entered_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }

 private:
  const int lanes_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_E2E_GATED_BACKEND_H_
