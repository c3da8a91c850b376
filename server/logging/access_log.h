// AccessLog: one line per finished RPC (--access_log=PATH), in the server's
// log format. Text:
//
//   2024-05-01T12:34:56.123456Z peer=ipv4:127.0.0.1:41234 method=Forward
//   request_id=3f2a9c10-17 code=OK latency_us=812 request_bytes=1090
//   response_bytes=1040
//
// (one line), with `principal=alice` when the server authenticates callers,
// and for weight changes (the audit trail, allowed or refused)
// `action=register|replace|unregister weights=<set name>`. JSON:
//
//   {"ts":"2024-05-01T12:34:56.123456Z","logger":"access",
//    "peer":"ipv4:127.0.0.1:41234","method":"Forward","request_id":"3f2a9c10-17",
//    "code":"OK","latency_us":812,"request_bytes":1090,"response_bytes":1040}
//
// Lines carry sizes and outcomes only, never tensor contents. They are
// written independently of --log_level.
//
// Used by the gRPC frontend (Conv1dService), which records every call as it
// finishes; conv1d_server creates one when --access_log is set.
//
// Thread-safety: Record() may be called concurrently from any thread and
// never waits for the disk: it formats the line and queues it for a writer
// thread, which appends and flushes each line. When the writer falls
// 8192 lines behind, the oldest queued lines are dropped (dropped_lines()
// counts them) rather than stalling the calls being answered. The
// destructor writes out every queued line.
#ifndef CONV1D_SERVER_LOGGING_ACCESS_LOG_H_
#define CONV1D_SERVER_LOGGING_ACCESS_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/logging/log_setup.h"
#include "spdlog/async_logger.h"
#include "spdlog/details/thread_pool.h"

namespace conv1d {

// What is known about a call when it finishes. Views need only live for the
// Record() call.
struct AccessRecord {
  std::string_view peer;        // gRPC's form: ipv4:127.0.0.1:41234
  std::string_view method;      // RPC name: Forward, ServerInfo, ...
  std::string_view request_id;  // the x-request-id sent back to the client
  absl::StatusCode code = absl::StatusCode::kOk;
  int64_t latency_us = 0;       // handler start to the response being sent
  int64_t request_bytes = 0;    // serialized request message
  int64_t response_bytes = 0;   // serialized response message (0 on errors)
  // Empty values are left out of the line.
  std::string_view principal;   // authenticated caller (auth.h)
  std::string_view action;      // weight changes: register, replace, unregister
  std::string_view weights;     // weight changes: the set's name
};

class AccessLog {
 public:
  // Queued lines the writer may fall behind by before dropping the oldest.
  static constexpr size_t kQueueLines = 8192;

  // `path`: a file, created or appended to, or "-" for stderr.
  // Fails (UNAVAILABLE naming the path and the reason) when the file cannot
  // be opened for writing.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Create(const std::string& path,
                                                           LogFormat format);
  ~AccessLog();

  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  void Record(const AccessRecord& record);
  // Lines dropped because the writer fell kQueueLines behind.
  int64_t dropped_lines() const;

 private:
  AccessLog(LogFormat format, std::shared_ptr<spdlog::details::thread_pool> writer,
            std::shared_ptr<spdlog::async_logger> logger)
      : format_(format), writer_(std::move(writer)), logger_(std::move(logger)) {}

  const LogFormat format_;
  // Declared first so that it is destroyed last: its destructor writes out
  // the queue, whose entries hold references to `logger_`.
  std::shared_ptr<spdlog::details::thread_pool> writer_;
  std::shared_ptr<spdlog::async_logger> logger_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_LOGGING_ACCESS_LOG_H_
