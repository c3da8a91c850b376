#include "server/logging/log_rate_limit.h"

namespace conv1d {

LogRateLimiter::Verdict LogRateLimiter::Admit(const char* file, int line, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(std::string(file != nullptr ? file : "?"), line);
  auto it = sources_.find(key);
  if (it == sources_.end()) {
    if (static_cast<int>(sources_.size()) >= options_.max_sources) {
      auto oldest = sources_.begin();
      for (auto s = sources_.begin(); s != sources_.end(); ++s) {
        if (s->second.window_start < oldest->second.window_start) oldest = s;
      }
      sources_.erase(oldest);
    }
    it = sources_.emplace(std::move(key), Source{now, 0, 0}).first;
  }
  Source& s = it->second;
  Verdict v;
  if (now - s.window_start >= options_.window) {
    v.suppressed = s.dropped;
    s = Source{now, 0, 0};
  }
  if (s.written < options_.burst) {
    ++s.written;
    v.write = true;
  } else {
    ++s.dropped;
  }
  return v;
}

}  // namespace conv1d
