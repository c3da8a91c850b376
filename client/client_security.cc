#include "client/client_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

absl::StatusOr<std::string> ReadFile(const char* option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(option, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& s) {
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    return absl::InvalidArgumentError(s.tls_cert_file.empty()
                                          ? "tls_key: needs tls_cert"
                                          : "tls_cert: needs tls_key");
  }
  if (s.tls_ca_file.empty()) {
    if (!s.tls_cert_file.empty()) {
      return absl::InvalidArgumentError("tls_cert: needs tls_ca (the server's CA)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadFile("tls_ca", s.tls_ca_file);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = std::move(*ca);
  if (!s.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile("tls_cert", s.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile("tls_key", s.tls_key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = std::move(*cert);
    options.pem_private_key = std::move(*key);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::string> AuthorizationHeader(const ClientSecurity& s) {
  if (!s.token.empty() && !s.token_file.empty()) {
    return absl::InvalidArgumentError("token: give token or token_file, not both");
  }
  std::string token = s.token;
  if (!s.token_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile("token_file", s.token_file);
    if (!text.ok()) return text.status();
    token = std::string(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_file: '", s.token_file, "' has an empty first line"));
    }
  }
  if (token.empty()) return std::string();
  for (char c : token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("token: has a space or control character");
    }
  }
  return absl::StrCat("Bearer ", token);
}

}  // namespace conv1d
