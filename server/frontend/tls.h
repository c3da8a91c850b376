// TLS and mutual TLS for the gRPC listener (docs/security.md).
//
// MakeServerCredentials turns the --tls_* flags into gRPC server credentials
// backed by gRPC's FileWatcherCertificateProvider: the certificate, key and
// client CA files are re-read every reload_interval_s, so a renewed
// certificate (a rotated Kubernetes secret, a certbot renewal) is served to
// new connections without a restart; connections already open keep the
// certificate they were made with. With a client CA the listener requires
// and verifies a client certificate signed by it (mTLS).
//
// CheckTlsFiles reads the files once at start with OpenSSL, so that a
// missing file, a malformed PEM or a key that does not belong to the
// certificate is a usage error naming the flag rather than a listener that
// fails every handshake.
//
// Used by Server::Create (gRPC listener) and, for CheckTlsFiles, by the
// metrics endpoint's TLS (server/metrics/metrics_tls.h).
//
// Thread-safety: pure functions; the credentials are shared and immutable.
#ifndef CONV1D_SERVER_FRONTEND_TLS_H_
#define CONV1D_SERVER_FRONTEND_TLS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace conv1d {

struct TlsOptions {
  // PEM certificate chain (leaf first) and its private key; both empty:
  // plaintext. One without the other is an error.
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle that client certificates must chain to; empty: no client
  // certificate is asked for. Needs cert_file.
  std::string client_ca_file;
  // How often the files are re-read, in seconds; 1..86400.
  int32_t reload_interval_s = 60;

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// OK when the options are plaintext or name readable, well-formed files
// whose key matches the certificate; else INVALID_ARGUMENT naming the flag
// (`flag_prefix` + "cert", "key", "client_ca", "reload_interval_s").
absl::Status CheckTlsFiles(const TlsOptions& options, const std::string& flag_prefix);

// Credentials for ServerBuilder::AddListeningPort: insecure when TLS is off.
// Runs CheckTlsFiles first and returns its error.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_TLS_H_
