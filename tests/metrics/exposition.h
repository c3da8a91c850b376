// Test helper: parses Prometheus text exposition (format 0.0.4) into
// series, and runs promtool on a text. Used by the metrics unit and live
// tests. Not thread-safe; plain values.
#ifndef CONV1D_TESTS_METRICS_EXPOSITION_H_
#define CONV1D_TESTS_METRICS_EXPOSITION_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conv1d::testing {

struct Series {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

class Exposition {
 public:
  // Parses every sample line; comment lines (# HELP / # TYPE) are kept as
  // metric-name -> type in types().
  static Exposition Parse(const std::string& text);

  const std::vector<Series>& series() const { return series_; }
  const std::map<std::string, std::string>& types() const { return types_; }

  // The value of the one series named `name` whose labels are exactly
  // `labels`; nullopt when absent.
  std::optional<double> Value(
      const std::string& name,
      const std::map<std::string, std::string>& labels = {}) const;
  // The cumulative count of histogram `name` (without _bucket) whose
  // labels are `labels` plus le == `le` (compared as numbers; +Inf allowed).
  std::optional<double> Bucket(const std::string& name,
                               const std::map<std::string, std::string>& labels,
                               double le) const;
  // All `le` bounds of a histogram series, ascending, +Inf last.
  std::vector<double> Bounds(
      const std::string& name,
      const std::map<std::string, std::string>& labels) const;
  // Every distinct metric name (samples' names, suffixes included).
  std::vector<std::string> Names() const;

 private:
  // (le, cumulative count) of every bucket of histogram `name` whose other
  // labels are `labels`, in exposition order.
  std::vector<std::pair<double, double>> Buckets(
      const std::string& name, const std::map<std::string, std::string>& labels) const;

  std::vector<Series> series_;
  std::map<std::string, std::string> types_;
};

// Runs `promtool check metrics` on `text`; returns its exit status and
// fills `output` with what it printed. `promtool` is the binary's path.
int PromtoolCheckMetrics(const std::string& promtool, const std::string& text,
                         std::string* output);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_METRICS_EXPOSITION_H_
