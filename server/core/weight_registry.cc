#include "server/core/weight_registry.h"

#include <atomic>

#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/conv_problem.h"

namespace conv1d {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
         c == '/';
}

// std::map with std::less<> looks up by string_view only when the view is
// std::string_view; Debian's absl::string_view is its own type.
std::string_view AsStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace

uint64_t NewUnregisteredWeightsId() {
  static std::atomic<uint64_t> next{uint64_t{1} << 62};
  return next.fetch_add(1, std::memory_order_relaxed);
}

TensorView WeightSet::weight() const {
  TensorView v;
  v.dtype = dtype;
  v.shape = {dim, width};
  v.data = weight_bytes.data();
  v.bytes = static_cast<int64_t>(weight_bytes.size());
  v.owner = weak_from_this().lock();
  v.cache_id = id;
  return v;
}

TensorView WeightSet::bias() const {
  TensorView v;
  v.dtype = dtype;
  v.shape = {dim};
  if (!has_bias) return v;
  v.data = bias_bytes.data();
  v.bytes = static_cast<int64_t>(bias_bytes.size());
  v.owner = weak_from_this().lock();
  v.cache_id = id;
  return v;
}

int64_t WeightSet::bytes() const {
  return static_cast<int64_t>(weight_bytes.size() + bias_bytes.size());
}

WeightRegistry::WeightRegistry(Observer* observer, int64_t max_total_bytes)
    : observer_(observer), max_total_bytes_(max_total_bytes) {}

absl::Status WeightRegistry::ValidateName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("name: must not be empty");
  }
  if (name.size() > kMaxWeightSetNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", name.size(), " characters, at most ",
                     kMaxWeightSetNameLength, " allowed"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: character ", i, " (code ",
          static_cast<int>(static_cast<unsigned char>(name[i])),
          ") is not one of [A-Za-z0-9._/-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const WeightSet>> WeightRegistry::Register(
    std::string name, DType dtype, int64_t dim, int32_t width,
    std::string weight_bytes, absl::optional<std::string> bias_bytes,
    bool replace, WeightOwner owner, const MayChangeFn& may_replace) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (width < 1 || width > kMaxWidth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "width: ", width, " is outside 1..", kMaxWidth));
  }
  // The bound keeps dim * width * element size inside int64.
  constexpr int64_t kMaxDim = std::numeric_limits<int64_t>::max() /
                              (kMaxWidth * int64_t{4});
  if (dim < 1 || dim > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim: ", dim, " is outside 1..", kMaxDim));
  }
  const int64_t elem = DTypeSize(dtype);
  const int64_t want_weight = dim * width * elem;
  if (static_cast<int64_t>(weight_bytes.size()) != want_weight) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight: ", weight_bytes.size(), " bytes, expected ", want_weight,
        " (dim ", dim, " x width ", width, " x ", elem, "-byte ",
        DTypeName(dtype), ")"));
  }
  if (bias_bytes.has_value() &&
      static_cast<int64_t>(bias_bytes->size()) != dim * elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bias: ", bias_bytes->size(), " bytes, expected ", dim * elem,
        " (dim ", dim, " x ", elem, "-byte ", DTypeName(dtype), ")"));
  }

  auto set = std::make_shared<WeightSet>();
  set->name = std::move(name);
  set->dtype = dtype;
  set->dim = dim;
  set->width = width;
  set->has_bias = bias_bytes.has_value();
  set->weight_bytes = std::move(weight_bytes);
  if (bias_bytes.has_value()) set->bias_bytes = std::move(*bias_bytes);
  set->owner = std::move(owner);

  absl::MutexLock lock(&mu_);
  auto it = sets_.find(set->name);
  int64_t freed = 0;
  if (it != sets_.end()) {
    if (!replace) {
      return absl::AlreadyExistsError(absl::StrCat(
          "weights are already registered under '", set->name,
          "'; set replace to overwrite them"));
    }
    if (may_replace) {
      if (absl::Status s = may_replace(*it->second); !s.ok()) return s;
    }
    freed = it->second->bytes();
  }
  const int64_t new_total = total_bytes_ - freed + set->bytes();
  if (new_total > max_total_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "registering '", set->name, "' (", set->bytes(),
        " bytes) would bring registered weights to ", new_total,
        " bytes, above the limit of ", max_total_bytes_,
        "; unregister some sets first"));
  }
  set->id = next_id_++;
  total_bytes_ = new_total;
  std::shared_ptr<const WeightSet> result = set;
  if (it != sets_.end()) {
    it->second = result;
  } else {
    sets_.emplace(set->name, result);
  }
  ReportLocked();
  return result;
}

absl::Status WeightRegistry::Unregister(absl::string_view name,
                                        const MayChangeFn& may_remove) {
  absl::MutexLock lock(&mu_);
  auto it = sets_.find(AsStd(name));
  if (it == sets_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no weights registered under '", name, "'"));
  }
  if (may_remove) {
    if (absl::Status s = may_remove(*it->second); !s.ok()) return s;
  }
  total_bytes_ -= it->second->bytes();
  sets_.erase(it);
  ReportLocked();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const WeightSet>> WeightRegistry::Lookup(
    absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = sets_.find(AsStd(name));
  if (it == sets_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no weights registered under '", name, "'"));
  }
  return it->second;
}

std::vector<std::shared_ptr<const WeightSet>> WeightRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const WeightSet>> out;
  out.reserve(sets_.size());
  for (const auto& [name, set] : sets_) out.push_back(set);
  return out;
}

int64_t WeightRegistry::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

void WeightRegistry::ReportLocked() {
  if (observer_ != nullptr) {
    observer_->OnWeightsChanged(static_cast<int64_t>(sets_.size()),
                                total_bytes_);
  }
}

}  // namespace conv1d
