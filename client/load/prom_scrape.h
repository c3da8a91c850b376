// Scraping a Prometheus text endpoint for the load generator: a plain
// HTTP/1.0 GET over a TCP socket, and summing a metric's samples across
// label sets (optionally only those whose labels contain a substring).
//
// Used by load_runner.cc and the unit tests. Stateless: thread-safe.
#ifndef CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_
#define CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace conv1d {

// `url` is http://host:port/path. Returns the response body of a 200.
absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout);

// Sum of every sample named exactly `name` whose label text (between the
// braces) contains `label_filter`; 0 when none. `samples`, when given, is set
// to how many samples were summed (e.g. one per GPU, for a mean).
double SumMetric(absl::string_view exposition, absl::string_view name,
                 absl::string_view label_filter = "", int* samples = nullptr);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_
