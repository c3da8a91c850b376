#include "server/frontend/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace conv1d {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Opens `path` for reading or returns INVALID_ARGUMENT naming `flag`.
absl::StatusOr<std::FILE*> Open(const std::string& flag, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  return f;
}

}  // namespace

absl::Status CheckTlsFiles(const TlsOptions& o, const std::string& prefix) {
  if (!o.enabled()) {
    if (!o.client_ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", prefix, "client_ca: needs --", prefix, "cert and --", prefix, "key"));
    }
    return absl::OkStatus();
  }
  if (o.cert_file.empty() || o.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", prefix, o.cert_file.empty() ? "cert" : "key", ": must be given with --",
        prefix, o.cert_file.empty() ? "key" : "cert"));
  }
  if (o.reload_interval_s < 1 || o.reload_interval_s > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", prefix, "reload_interval_s: ", o.reload_interval_s, " is outside 1..86400"));
  }
  ERR_clear_error();
  absl::StatusOr<std::FILE*> f = Open(prefix + "cert", o.cert_file);
  if (!f.ok()) return f.status();
  X509* cert = PEM_read_X509(*f, nullptr, nullptr, nullptr);
  std::fclose(*f);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--", prefix, "cert: '", o.cert_file,
                                                   "' holds no PEM certificate: ",
                                                   OpenSslError()));
  }
  f = Open(prefix + "key", o.key_file);
  if (!f.ok()) {
    X509_free(cert);
    return f.status();
  }
  EVP_PKEY* key = PEM_read_PrivateKey(*f, nullptr, nullptr, nullptr);
  std::fclose(*f);
  if (key == nullptr) {
    X509_free(cert);
    return absl::InvalidArgumentError(absl::StrCat("--", prefix, "key: '", o.key_file,
                                                   "' holds no unencrypted PEM private key: ",
                                                   OpenSslError()));
  }
  const bool match = X509_check_private_key(cert, key) == 1;
  ERR_clear_error();
  EVP_PKEY_free(key);
  X509_free(cert);
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", prefix, "key: '", o.key_file, "' is not the key of --", prefix, "cert '",
        o.cert_file, "'"));
  }
  if (!o.client_ca_file.empty()) {
    f = Open(prefix + "client_ca", o.client_ca_file);
    if (!f.ok()) return f.status();
    X509* ca = PEM_read_X509(*f, nullptr, nullptr, nullptr);
    std::fclose(*f);
    if (ca == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--", prefix, "client_ca: '",
                                                     o.client_ca_file,
                                                     "' holds no PEM certificate: ",
                                                     OpenSslError()));
    }
    X509_free(ca);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& o) {
  if (absl::Status s = CheckTlsFiles(o, "tls_"); !s.ok()) return s;
  if (!o.enabled()) return grpc::InsecureServerCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      o.key_file, o.cert_file, o.client_ca_file,
      static_cast<unsigned int>(o.reload_interval_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (o.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::experimental::TlsServerCredentials(options);
  if (creds == nullptr) {
    return absl::InvalidArgumentError("--tls_cert: gRPC refused the TLS options");
  }
  return creds;
}

}  // namespace conv1d
