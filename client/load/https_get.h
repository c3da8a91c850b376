// HTTPS for the load generator's scrapes (prom_scrape.h): the TLS settings
// of https:// metrics URLs, loaded once into an OpenSSL client context, and
// one request/answer exchange over TLS on a connected socket.
//
// The endpoint's certificate must chain to the CA bundle given (or, without
// one, to the system's default verify paths) and name the URL's host: a DNS
// subject alternative name for a host name (which is also sent as SNI), an
// IP one for an address. A client certificate and key, when given, are
// presented to endpoints that ask for one (mutual TLS). TLS 1.2 at least.
//
// Used by HttpGet (prom_scrape.cc) and conv1d_load's --metrics_tls_* flags
// (client/load/main.cc). Thread-safety: a ScrapeTls is immutable once
// created; any number of threads may call Exchange on one at once (each call
// has its own connection).
#ifndef CONV1D_CLIENT_LOAD_HTTPS_GET_H_
#define CONV1D_CLIENT_LOAD_HTTPS_GET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace conv1d {

// The files of conv1d_load's --metrics_tls_ca, --metrics_tls_cert and
// --metrics_tls_key.
struct ScrapeTlsOptions {
  std::string ca_file;    // PEM CA bundle; empty: the system's default verify paths
  std::string cert_file;  // PEM client certificate chain (mutual TLS), with key_file
  std::string key_file;   // PEM private key of cert_file
};

class ScrapeTls {
 public:
  // Loads the files. INVALID_ARGUMENT naming the flag (--metrics_tls_ca,
  // --metrics_tls_cert, --metrics_tls_key) and the file when a file cannot
  // be read or parsed, when only one of the client pair is given, or when
  // the key does not match the certificate.
  static absl::StatusOr<std::shared_ptr<const ScrapeTls>> Create(
      const ScrapeTlsOptions& options);
  ~ScrapeTls();

  ScrapeTls(const ScrapeTls&) = delete;
  ScrapeTls& operator=(const ScrapeTls&) = delete;

  // Completes a TLS handshake on the connected socket `fd` as a client of
  // `host` (the URL's host: a name or an IP address), sends `request` and
  // returns every byte of the answer until the endpoint closes. `fd` is left
  // open (it is the caller's) and switched to non-blocking. UNAVAILABLE
  // when the handshake fails ("certificate verify failed: <reason>" when
  // the endpoint's certificate is refused), DEADLINE_EXCEEDED past
  // `deadline`.
  absl::StatusOr<std::string> Exchange(int fd, const std::string& host,
                                       absl::string_view request, absl::Time deadline) const;

 private:
  ScrapeTls() = default;

  SSL_CTX* ctx_ = nullptr;
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_HTTPS_GET_H_
