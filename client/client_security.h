// Transport security and credentials of the C++ client: TLS (server
// verified against a CA file), mutual TLS (a client certificate and key),
// and a bearer token sent as `authorization: Bearer <token>` metadata on
// every call (docs/security.md).
//
// Used by Conv1dClient::Create (ClientOptions::security), and through
// SecurityFromFlags (security_flags.h) by conv1d_client and conv1d_load.
// The token goes into each call's metadata rather than gRPC call
// credentials, which gRPC sends over TLS only: a plaintext hop that a
// sidecar or loopback protects is a supported setup.
//
// Thread-safety: pure functions.
#ifndef CONV1D_CLIENT_CLIENT_SECURITY_H_
#define CONV1D_CLIENT_CLIENT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace conv1d {

struct ClientSecurity {
  // PEM CA bundle that the server's certificate must chain to; set: TLS.
  // Empty with the others empty: plaintext.
  std::string tls_ca_file;
  // PEM client certificate chain and its key, for servers that require
  // one (mTLS). Both or neither; need tls_ca_file.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The bearer token, or a file whose first line is the token (not both).
  std::string token;
  std::string token_file;
};

// Insecure credentials when no TLS file is set. INVALID_ARGUMENT naming the
// option ("tls_ca", "tls_cert", "tls_key") for an unreadable file or a
// combination that does not go together.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& security);

// "Bearer <token>" for the authorization metadata, "" when no token is set.
// INVALID_ARGUMENT naming "token" / "token_file" for both given, an
// unreadable file, or an empty token.
absl::StatusOr<std::string> AuthorizationHeader(const ClientSecurity& security);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_CLIENT_SECURITY_H_
