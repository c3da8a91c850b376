#include "client/security_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that the server's certificate must chain to; set: TLS");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate (mutual TLS); needs --tls_key and --tls_ca");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token, "",
          "bearer token sent with every call (visible in `ps`: prefer "
          "--token_file or the CONV1D_TOKEN environment variable)");
ABSL_FLAG(std::string, token_file, "", "file whose first line is the bearer token");

namespace conv1d {

ClientSecurity SecurityFromFlags() {
  ClientSecurity s;
  s.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  s.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  s.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  s.token = absl::GetFlag(FLAGS_token);
  s.token_file = absl::GetFlag(FLAGS_token_file);
  if (s.token.empty() && s.token_file.empty()) {
    if (const char* env = std::getenv("CONV1D_TOKEN"); env != nullptr) s.token = env;
  }
  return s;
}

}  // namespace conv1d
