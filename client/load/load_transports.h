// The LoadTransport implementations (load_transport.h), one per protocol;
// each serves every memory kind. Internal to client/load: callers use
// MakeLoadTransport.
#ifndef CONV1D_CLIENT_LOAD_LOAD_TRANSPORTS_H_
#define CONV1D_CLIENT_LOAD_LOAD_TRANSPORTS_H_

#include <memory>
#include <string>

#include "client/conv1d_client.h"
#include "client/load/load_transport.h"

namespace conv1d {

// conv1d.v1.Conv1d calls through `client` (load_transport_v1.cc).
std::unique_ptr<LoadTransport> NewV1Transport(std::string memory, Conv1dClient* client);
// inference.GRPCInferenceService/ModelInfer on `client`'s channels
// (load_transport_oip.cc).
std::unique_ptr<LoadTransport> NewOipTransport(std::string memory, Conv1dClient* client);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_LOAD_TRANSPORTS_H_
