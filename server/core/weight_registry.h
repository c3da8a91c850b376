// WeightRegistry: named weight sets ("models") that requests refer to by
// name instead of sending weights inline (DESIGN §3).
//
// The frontend registers, replaces, lists and removes sets; request handlers
// look a set up and keep the returned shared_ptr in their Task (as its
// keepalive), so a set stays valid for every request that already holds it
// even after it is unregistered or replaced. A WeightSet is immutable once
// registered. Backends that keep device copies key them by WeightSet::id,
// which is never reused (a replacement gets a new id).
//
// Thread-safety: every method is thread-safe. Observer::OnWeightsChanged is
// called with the registry lock held (so the totals it reports arrive in
// order); it must not call back into the registry.
#ifndef CONV1D_SERVER_CORE_WEIGHT_REGISTRY_H_
#define CONV1D_SERVER_CORE_WEIGHT_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"
#include "server/core/dtype.h"
#include "server/core/observer.h"
#include "server/core/tensor.h"

namespace conv1d {

inline constexpr size_t kMaxWeightSetNameLength = 128;

// Who registered a set (the frontend's principal; empty when the server
// authenticates nobody) and whether principals other than its owner may use
// it. The registry stores it; the frontend's policy reads it.
struct WeightSet;

struct WeightOwner {
  std::string principal;
  bool shared = true;
};

// Decides whether a registered set may be replaced or removed: OK, or the
// error to return. Called with the registry lock held; must not call back.
using MayChangeFn = std::function<absl::Status(const WeightSet& existing)>;

// An id for a weight set kept outside any registry (a decode session's
// inline weights), from a range registry ids never reach, so that backends
// may cache such sets on the device too. Never reused; thread-safe.
uint64_t NewUnregisteredWeightsId();

// Immutable once registered; always held through shared_ptr<const>.
struct WeightSet : std::enable_shared_from_this<WeightSet> {
  std::string name;
  uint64_t id = 0;  // unique per registry, never reused
  DType dtype = DType::kF32;
  int64_t dim = 0;    // D
  int32_t width = 0;  // W
  bool has_bias = false;
  std::string weight_bytes;  // little-endian [D, W] of dtype
  std::string bias_bytes;    // little-endian [D] of dtype; empty if !has_bias
  WeightOwner owner;

  // Views into the bytes above. Their `owner` keeps this set alive when it
  // is held by a shared_ptr (as every registered set is), and their
  // `cache_id` is `id`, so backends may keep device copies of both. bias()
  // is absent (data == nullptr) when !has_bias.
  TensorView weight() const;
  TensorView bias() const;
  // Bytes counted against the registry's budget (weight + bias).
  int64_t bytes() const;
};

class WeightRegistry {
 public:
  // `observer` may be null and is not owned. `max_total_bytes` bounds the sum
  // of WeightSet::bytes() over all registered sets.
  explicit WeightRegistry(Observer* observer = nullptr,
                          int64_t max_total_bytes = int64_t{16} << 30);

  WeightRegistry(const WeightRegistry&) = delete;
  WeightRegistry& operator=(const WeightRegistry&) = delete;

  // Registers a set under `name`; with `replace`, an existing set of that
  // name is replaced (requests holding the old one keep it).
  // Errors: INVALID_ARGUMENT naming the field for a bad "name" (empty, longer
  // than 128 characters, characters outside [A-Za-z0-9._/-]), "width"
  // outside 1..kMaxWidth, "dim" < 1, "weight" bytes != dim*width*size(dtype),
  // "bias" bytes != dim*size(dtype); ALREADY_EXISTS when `name` is taken and
  // !replace; RESOURCE_EXHAUSTED when the total would pass max_total_bytes;
  // `may_replace`'s error when it refuses to let the existing set go.
  absl::StatusOr<std::shared_ptr<const WeightSet>> Register(
      std::string name, DType dtype, int64_t dim, int32_t width,
      std::string weight_bytes, absl::optional<std::string> bias_bytes,
      bool replace, WeightOwner owner = {}, const MayChangeFn& may_replace = nullptr);

  // NOT_FOUND naming the set when nothing is registered under `name`;
  // `may_remove`'s error when it refuses.
  absl::Status Unregister(absl::string_view name, const MayChangeFn& may_remove = nullptr);

  // NOT_FOUND: "no weights registered under '<name>'".
  absl::StatusOr<std::shared_ptr<const WeightSet>> Lookup(
      absl::string_view name) const;

  // Every registered set, sorted by name.
  std::vector<std::shared_ptr<const WeightSet>> List() const;

  int64_t total_bytes() const;
  int64_t max_total_bytes() const { return max_total_bytes_; }

  // The name check Register applies; OK or INVALID_ARGUMENT naming "name".
  // Exposed so the frontend can validate a name before looking it up.
  static absl::Status ValidateName(absl::string_view name);

 private:
  void ReportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Observer* const observer_;  // may be null
  const int64_t max_total_bytes_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const WeightSet>, std::less<>> sets_
      ABSL_GUARDED_BY(mu_);
  int64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_WEIGHT_REGISTRY_H_
