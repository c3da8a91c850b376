#include "server/frontend/ownership.h"

#include "absl/strings/str_cat.h"

namespace conv1d {

absl::Status MayAccessSession(const Principal& p, const Session& session,
                              SessionAccess access) {
  if (session.spec().owner == p.name) return absl::OkStatus();
  if (p.role != AuthRole::kAdmin) return SessionNotFound(session.id());
  if (access == SessionAccess::kClose) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "session_id: session \"", session.id(), "\" belongs to another principal; principal '",
      p.name, "' (role admin) may close it, not step, commit, fork, export or take it over"));
}

RegionUser RegionUserOf(const Principal& p) {
  RegionUser user;
  user.principal = p.name;
  user.all_regions = p.role == AuthRole::kAdmin;
  return user;
}

}  // namespace conv1d
