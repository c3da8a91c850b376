// Who may touch a decode session or a shared-memory region of another
// principal (docs/security.md, "Sessions and shared memory"): the policy
// that ties conv1d.v1 sessions and registered regions to the principal that
// opened or registered them, as auth.h's does for weight sets.
//
//   - The owner may do everything with its sessions and regions.
//   - An `infer` principal is told that another principal's session or
//     region does not exist: NOT_FOUND, word for word the answer for an
//     unknown id or name, so that a guessed id reveals nothing.
//   - An `admin` may close any session and list and unregister any region
//     (operations: freeing slots and mappings), but may not step, commit,
//     fork, export or take over another's session, nor read or write
//     another's region: PERMISSION_DENIED naming the field. Those would hand
//     it a tenant's decode state or data, which no operation needs.
//   - Without authentication every caller is the same principal ("", an
//     admin; auth.h's PrincipalOf), so nothing changes.
//
// Used by Conv1dService (session_rpcs.cc, decode_stream.cc, and the
// shared-memory tensors of conv1d_service.cc), OipService (region calls and
// tensors) and OipSequences. Pure functions: thread-safe.
#ifndef CONV1D_SERVER_FRONTEND_OWNERSHIP_H_
#define CONV1D_SERVER_FRONTEND_OWNERSHIP_H_

#include "absl/status/status.h"
#include "server/core/session_manager.h"
#include "server/core/shm_registry.h"
#include "server/frontend/auth.h"

namespace conv1d {

// What a call does with a session it names.
enum class SessionAccess {
  kUse,    // step, commit, fork, export, or take it over on a Decode stream
  kClose,  // CloseSession
};

// OK when `p` may do `access` to `session`; otherwise NOT_FOUND or
// PERMISSION_DENIED as described above, naming session_id.
absl::Status MayAccessSession(const Principal& p, const Session& session,
                              SessionAccess access);

// `p` as the shared-memory registry sees it: its name, and all_regions for
// admins.
RegionUser RegionUserOf(const Principal& p);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OWNERSHIP_H_
