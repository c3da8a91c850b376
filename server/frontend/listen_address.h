// Listen addresses of the server's endpoints: the check applied before
// anything binds, and the reason a bind failed.
//
// An address is `host:port`: host an IPv4 literal, a bracketed IPv6 literal
// ([::], [::1]) or a DNS name (localhost), port 0..65535 in decimal (0 picks
// a free port). Anything else ("not-an-address", "127.0.0.1:99999") is
// refused with INVALID_ARGUMENT naming the flag, so conv1d_server exits 2
// rather than binding something else.
//
// Used by Server::Create for --listen and --metrics_listen.
// Thread-safety: pure functions (BindError opens and closes one socket).
#ifndef CONV1D_SERVER_FRONTEND_LISTEN_ADDRESS_H_
#define CONV1D_SERVER_FRONTEND_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/status.h"

namespace conv1d {

// OK or INVALID_ARGUMENT "--<flag>: ..." naming what is wrong.
absl::Status CheckListenAddress(const std::string& flag, const std::string& address);

// Why `address` (already checked) cannot be bound now: strerror of a plain
// bind() on it (e.g. "Address already in use"), or "" when it can be.
std::string BindError(const std::string& address);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_LISTEN_ADDRESS_H_
