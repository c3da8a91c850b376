// Scraping a Prometheus text endpoint for the load generator: an HTTP/1.0
// GET over a TCP socket, plain (http://) or over TLS (https://, through
// ScrapeTls in https_get.h), and summing a metric's samples across label
// sets (optionally only those whose labels contain a substring).
//
// Used by load_dispatch.cc and the unit tests. Stateless (a ScrapeTls is
// immutable): thread-safe.
#ifndef CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_
#define CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/load/https_get.h"

namespace conv1d {

// `url` is http://host[:port]/path (port 80 by default) or
// https://host[:port]/path (443). Returns the response body of a 200. An
// https:// URL is fetched with `tls` (its CA bundle and client pair) or,
// when null, with the system's default CAs and no client certificate; the
// endpoint's certificate must name `host`. An error of the TLS exchange
// (e.g. "TLS handshake failed: certificate verify failed: ...") is prefixed
// with the URL. `timeout` bounds the exchange after the connection is made.
absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout,
                                    const ScrapeTls* tls = nullptr);

// Sum of every sample named exactly `name` whose label text (between the
// braces) contains `label_filter`; 0 when none. `samples`, when given, is set
// to how many samples were summed (e.g. one per GPU, for a mean).
double SumMetric(absl::string_view exposition, absl::string_view name,
                 absl::string_view label_filter = "", int* samples = nullptr);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_PROM_SCRAPE_H_
