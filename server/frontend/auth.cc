#include "server/frontend/auth.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/frontend/status_mapping.h"

namespace conv1d {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 512;
constexpr size_t kMaxPrincipalLength = 64;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("._~+/=-", c) != nullptr;
}

bool IsPrincipalChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("._@-", c) != nullptr;
}

std::string Digest(std::string_view token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), md, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md), len));
}

}  // namespace

const char* AuthRoleName(AuthRole role) { return role == AuthRole::kAdmin ? "admin" : "infer"; }

absl::StatusOr<TokenTable> ParseTokenFile(std::string_view text) {
  TokenTable table;
  std::unordered_map<std::string, AuthRole> roles;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto error = [line_number](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what));
    };
    if (fields.size() != 3) {
      return error(absl::StrCat(fields.size(),
                                " fields, expected 3: <token> <principal> <role>"));
    }
    const absl::string_view token = fields[0], name = fields[1], role_name = fields[2];
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
      return error(absl::StrCat("token of ", token.size(), " characters, expected ",
                                kMinTokenLength, "..", kMaxTokenLength));
    }
    for (char c : token) {
      if (!IsTokenChar(c)) return error("token has a character outside [A-Za-z0-9._~+/=-]");
    }
    if (name.size() > kMaxPrincipalLength) {
      return error(absl::StrCat("principal of ", name.size(), " characters, at most ",
                                kMaxPrincipalLength));
    }
    for (char c : name) {
      if (!IsPrincipalChar(c)) {
        return error("principal has a character outside [A-Za-z0-9._@-]");
      }
    }
    AuthRole role;
    if (role_name == "infer") {
      role = AuthRole::kInfer;
    } else if (role_name == "admin") {
      role = AuthRole::kAdmin;
    } else {
      return error(absl::StrCat("role '", absl::CHexEscape(role_name),
                                "' is neither infer nor admin"));
    }
    auto [it, fresh] = roles.emplace(std::string(name), role);
    if (!fresh && it->second != role) {
      return error(absl::StrCat("principal '", name, "' already has role ",
                                AuthRoleName(it->second)));
    }
    Principal p;
    p.name = std::string(name);
    p.role = role;
    if (!table.emplace(Digest(std::string_view(token.data(), token.size())), std::move(p)).second) {
      return error("token repeats an earlier line's token");
    }
  }
  if (table.empty()) return absl::InvalidArgumentError("no token entries");
  return table;
}

absl::StatusOr<TokenTable> LoadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth_tokens_file: cannot read '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<TokenTable> table = ParseTokenFile(text.str());
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth_tokens_file '", path, "': ", table.status().message()));
  }
  return table;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(std::string tokens_file) {
  absl::StatusOr<TokenTable> table = LoadTokenFile(tokens_file);
  if (!table.ok()) return table.status();
  return std::unique_ptr<Authenticator>(
      new Authenticator(std::move(tokens_file), std::move(*table)));
}

absl::Status Authenticator::Reload() {
  absl::StatusOr<TokenTable> table = LoadTokenFile(tokens_file_);
  if (!table.ok()) return table.status();
  auto fresh = std::make_shared<const TokenTable>(std::move(*table));
  absl::MutexLock lock(&mu_);
  table_ = std::move(fresh);
  return absl::OkStatus();
}

size_t Authenticator::num_tokens() const {
  absl::MutexLock lock(&mu_);
  return table_->size();
}

absl::StatusOr<Principal> Authenticator::AuthenticateHeader(std::string_view value) const {
  absl::string_view v(value.data(), value.size());
  // The scheme is case-insensitive (RFC 7235).
  if (v.size() <= sizeof(kBearerPrefix) - 1 ||
      !absl::EqualsIgnoreCase(v.substr(0, sizeof(kBearerPrefix) - 1), kBearerPrefix)) {
    return absl::UnauthenticatedError(
        "authorization: expected 'Bearer <token>'");
  }
  v.remove_prefix(sizeof(kBearerPrefix) - 1);
  v = absl::StripAsciiWhitespace(v);
  if (v.size() > kMaxTokenLength) {
    return absl::UnauthenticatedError("authorization: unknown token");
  }
  const std::string digest = Digest(std::string_view(v.data(), v.size()));
  std::shared_ptr<const TokenTable> table;
  {
    absl::MutexLock lock(&mu_);
    table = table_;
  }
  auto it = table->find(digest);
  if (it == table->end()) return absl::UnauthenticatedError("authorization: unknown token");
  return it->second;
}

absl::StatusOr<Principal> PrincipalOf(
    const Authenticator* auth, const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  if (auth != nullptr) return auth->Authenticate(metadata);
  Principal everyone;
  everyone.role = AuthRole::kAdmin;
  return everyone;
}

absl::StatusOr<Principal> Authenticator::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "authorization: missing; send metadata 'authorization: Bearer <token>'");
  }
  return AuthenticateHeader(std::string_view(it->second.data(), it->second.size()));
}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* /*consumed_auth_metadata*/,
                                         OutputMetadata* /*response_metadata*/) {
  absl::StatusOr<Principal> p = auth_->Authenticate(auth_metadata);
  if (!p.ok()) return ToGrpcStatus(p.status());
  context->AddProperty("conv1d.principal", p->name);
  return grpc::Status::OK;
}

WeightOwner OwnerFor(const Principal& p) {
  WeightOwner owner;
  owner.principal = p.name;
  owner.shared = p.role == AuthRole::kAdmin;
  return owner;
}

absl::Status MayChangeWeights(const Principal& p, const WeightSet& existing) {
  if (p.role == AuthRole::kAdmin || (!existing.owner.shared && existing.owner.principal == p.name)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "name: weight set '", existing.name, "' belongs to ",
      existing.owner.shared ? "the admins" : "another principal", "; principal '", p.name,
      "' (role ", AuthRoleName(p.role), ") may not replace or unregister it"));
}

absl::Status MayUseWeights(const Principal& p, const WeightSet& set) {
  if (p.role == AuthRole::kAdmin || set.owner.shared || set.owner.principal == p.name) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "weights_name: weight set '", set.name, "' belongs to another principal; principal '",
      p.name, "' may not use it"));
}

}  // namespace conv1d
