// MetricsTlsProxy: HTTPS (and with a client CA, mutual TLS) for the
// Prometheus endpoint.
//
// Debian 12's civetweb, the web server inside prometheus-cpp's exporter, is
// built to load OpenSSL at run time but crashes on the first HTTPS request
// with OpenSSL 3 (a null function pointer in its worker), so the exporter
// itself serves plain HTTP on an internal loopback port and this proxy
// terminates TLS in front of it: it accepts on --metrics_listen, completes
// the handshake, passes the one request to the exporter and relays the
// answer (the exporter closes every connection after its answer).
//
// Bounds: at most max_connections connections are served at once (more
// are closed at once); a connection that does not finish its handshake or
// request within timeout_ms is closed; a request head is at most 16 KiB.
// The certificate and key are re-read on the first handshake after either
// file changes (renewal without restart; a pair that does not match is
// logged and the last good one kept). The client CA is read at start.
//
// Used by PrometheusObserver::Create when MetricsOptions has a certificate.
// Thread-safety: one accept thread, one thread per open connection; the
// destructor stops accepting, cuts open connections and joins them all.
#ifndef CONV1D_SERVER_METRICS_METRICS_TLS_H_
#define CONV1D_SERVER_METRICS_METRICS_TLS_H_

#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;

namespace conv1d {

struct MetricsTlsOptions {
  // host:port to accept HTTPS on (port 0: a free one, see bound_port()).
  std::string listen_address;
  // The exporter's plain HTTP port on 127.0.0.1.
  int upstream_port = 0;
  // PEM certificate chain and key; PEM CA bundle for client certificates
  // (empty: none asked for).
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  int max_connections = 8;
  int timeout_ms = 5000;
};

class MetricsTlsProxy {
 public:
  // INVALID_ARGUMENT "--metrics_listen: ..." when the address cannot be
  // bound; UNAVAILABLE naming the file when the certificate, key or CA
  // cannot be loaded.
  static absl::StatusOr<std::unique_ptr<MetricsTlsProxy>> Create(MetricsTlsOptions options);
  ~MetricsTlsProxy();

  MetricsTlsProxy(const MetricsTlsProxy&) = delete;
  MetricsTlsProxy& operator=(const MetricsTlsProxy&) = delete;

  int bound_port() const { return bound_port_; }

 private:
  explicit MetricsTlsProxy(MetricsTlsOptions options) : options_(std::move(options)) {}
  absl::Status LoadPairIfChanged();
  static int OnCertificate(SSL* ssl, void* self);
  void AcceptLoop();
  void Serve(int fd);

  const MetricsTlsOptions options_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  int bound_port_ = 0;
  std::thread acceptor_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);
  int serving_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex pair_mu_;
  std::timespec cert_mtime_ ABSL_GUARDED_BY(pair_mu_) = {};
  std::timespec key_mtime_ ABSL_GUARDED_BY(pair_mu_) = {};
  X509* cert_ ABSL_GUARDED_BY(pair_mu_) = nullptr;
  void* chain_ ABSL_GUARDED_BY(pair_mu_) = nullptr;  // STACK_OF(X509)*
  EVP_PKEY* key_ ABSL_GUARDED_BY(pair_mu_) = nullptr;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_METRICS_METRICS_TLS_H_
