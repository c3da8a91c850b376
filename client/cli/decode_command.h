// The `decode` command of conv1d_client: runs a sequence through a decode
// session (a Decode stream) token block by token block, prints the steps'
// latency, and with --verify compares the joined y with the local CPU's
// Forward of the whole sequence. Used by main.cc only; single-threaded.
#ifndef CONV1D_CLIENT_CLI_DECODE_COMMAND_H_
#define CONV1D_CLIENT_CLI_DECODE_COMMAND_H_

#include <cstdint>

#include "client/conv1d_client.h"
#include "client/workload.h"
#include "conv1d/v1/conv1d.pb.h"

namespace conv1d {

struct DecodeCommand {
  // The whole sequence and the weights (inline or by name), as a Forward.
  v1::ForwardRequest whole;
  int64_t step_tokens = 1;
  int64_t state_len = 0;  // 0: max(W-1, 1)
  bool verify = false;
  // The weights when `whole` names a registered set (for --verify).
  const WeightSet* registered = nullptr;
};

// Exit code: 0 ok, 1 wrong answer, 2 a failed call or bad arguments.
int RunDecodeCommand(Conv1dClient& client, const DecodeCommand& command);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_CLI_DECODE_COMMAND_H_
