// The command-line flags of client security shared by conv1d_client and
// conv1d_load: --tls_ca, --tls_cert, --tls_key, --token, --token_file
// (client_security.h, docs/security.md).
//
// Thread-safety: read the flags after absl::ParseCommandLine, from any
// thread.
#ifndef CONV1D_CLIENT_SECURITY_FLAGS_H_
#define CONV1D_CLIENT_SECURITY_FLAGS_H_

#include "client/client_security.h"

namespace conv1d {

// The flags' values. The token may also come from the CONV1D_TOKEN
// environment variable (so that it stays out of `ps` output) when neither
// --token nor --token_file is given.
ClientSecurity SecurityFromFlags();

}  // namespace conv1d

#endif  // CONV1D_CLIENT_SECURITY_FLAGS_H_
