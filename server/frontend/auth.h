// Bearer-token authentication and the weight-set access policy of the gRPC
// frontend (docs/security.md).
//
// A token file (--auth_tokens_file) maps tokens to principals and roles, one
// entry a line:
//
//   # token                              principal   role
//   3c1f0d9e6b0a4f2c9d8e7a6b5c4d3e2f     alice       infer
//   9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d     ops         admin
//
// Blank lines and lines starting with '#' are skipped. Tokens are 16..512
// characters of [A-Za-z0-9._~+/=-] (what fits an HTTP bearer token), unique
// in the file; principals are 1..64 characters of [A-Za-z0-9._@-]; a
// principal may have several tokens (rotation), all with one role. A client
// sends `authorization: Bearer <token>` metadata with every call.
//
// Roles: `infer` may compute, list the sets it may use, ask ServerInfo, and
// register, replace and unregister weight sets of its own, which are private
// to it. `admin` may do all of that on any set, and the sets an admin
// registers are shared: every principal may compute with them, only admins
// may change them. A weight set registered by one principal cannot be
// replaced, unregistered or used by another `infer` principal
// (PERMISSION_DENIED). Without a token file nobody is authenticated and every
// call may do everything (sets have no owner). Decode sessions and
// shared-memory regions belong to principals too: ownership.h.
//
// Used by Conv1dService (Authenticate on every call, then the policy
// functions), by Server (the TokenAuthProcessor on TLS listeners whose health
// service is not open) and by conv1d_server's SIGHUP handler (Reload).
//
// Thread-safety: Authenticator is thread-safe; Reload swaps the whole table
// at once, so a call sees either the old or the new table, never a mix. The
// policy functions are pure.
#ifndef CONV1D_SERVER_FRONTEND_AUTH_H_
#define CONV1D_SERVER_FRONTEND_AUTH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/server_context.h"
#include "server/core/weight_registry.h"

namespace conv1d {

// The metadata key of the token and its scheme.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

enum class AuthRole { kInfer, kAdmin };
const char* AuthRoleName(AuthRole role);

struct Principal {
  std::string name;
  AuthRole role = AuthRole::kInfer;
};

// Token digest (SHA-256, hex) -> principal. Only digests are kept, so a
// lookup never compares secret bytes and a core dump holds no token.
using TokenTable = std::unordered_map<std::string, Principal>;

// Parses a token file's text. INVALID_ARGUMENT naming the line and the
// problem (never quoting a token).
absl::StatusOr<TokenTable> ParseTokenFile(std::string_view text);
// Reads and parses `path`; INVALID_ARGUMENT naming the path when it cannot
// be read or is empty of entries.
absl::StatusOr<TokenTable> LoadTokenFile(const std::string& path);

class Authenticator {
 public:
  // Loads `tokens_file`; its errors are Create's errors.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(std::string tokens_file);

  // Re-reads the token file. On error the previous table stays in force and
  // the error is returned (the caller logs it).
  absl::Status Reload();

  // The principal a call's `authorization` metadata names. UNAUTHENTICATED
  // when the metadata is missing, not a bearer token, or an unknown token.
  absl::StatusOr<Principal> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // The same for one header value ("Bearer <token>").
  absl::StatusOr<Principal> AuthenticateHeader(std::string_view value) const;

  const std::string& tokens_file() const { return tokens_file_; }
  size_t num_tokens() const;

 private:
  Authenticator(std::string tokens_file, TokenTable table)
      : tokens_file_(std::move(tokens_file)),
        table_(std::make_shared<const TokenTable>(std::move(table))) {}

  const std::string tokens_file_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);
};

// Rejects every call without a valid token before its handler runs
// (UNAUTHENTICATED). Installed on TLS listeners when the health service is
// not to stay open, so that grpc.health.v1 and reflection need a token too;
// gRPC runs metadata processors on secure listeners only.
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `auth` is not owned and must outlive the gRPC server.
  explicit TokenAuthProcessor(const Authenticator* auth) : auth_(auth) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const Authenticator* const auth_;
};

// The principal of a call: `auth`'s verdict on its metadata, or, when the
// server has no authentication (`auth` null), an admin: every caller may do
// everything.
absl::StatusOr<Principal> PrincipalOf(
    const Authenticator* auth, const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// The owner recorded for a set `p` registers: its name, and whether every
// principal may use the set (admins' sets are shared).
WeightOwner OwnerFor(const Principal& p);

// OK, or PERMISSION_DENIED naming the set, when `p` may replace or
// unregister `existing`.
absl::Status MayChangeWeights(const Principal& p, const WeightSet& existing);

// OK, or PERMISSION_DENIED naming the set, when `p` may compute with `set`
// or see it in ListWeights.
absl::Status MayUseWeights(const Principal& p, const WeightSet& set);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_AUTH_H_
