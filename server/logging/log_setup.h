// Process-wide log configuration for conv1d_server: the format (--log_format)
// and level (--log_level) of the server's log, which goes to stderr.
//
// ConfigureLogging replaces spdlog's default logger (stdout, unnamed) by one
// named "conv1d" on stderr, and routes gRPC core's own messages (gpr_log)
// and protobuf's through two more loggers, "grpc" and "protobuf", on the
// same sink, so that with --log_format=json every line the process writes
// to stderr is JSON. gRPC still filters its messages by GRPC_VERBOSITY
// (default ERROR) first. Library lines are rate-limited per source line
// (log_rate_limit.h: 10 per minute, then a count of what was dropped), since
// clients can trigger them (failed TLS handshakes, strings that are not
// UTF-8).
//
// Used by server/main.cc once at start-up; tests use the parsers.
//
// Thread-safety: ConfigureLogging must run before other threads log (it
// swaps the default logger); the parsers are pure.
#ifndef CONV1D_SERVER_LOGGING_LOG_SETUP_H_
#define CONV1D_SERVER_LOGGING_LOG_SETUP_H_

#include <memory>
#include <optional>
#include <string_view>

#include "spdlog/common.h"
#include "spdlog/formatter.h"

namespace conv1d {

enum class LogFormat {
  kText,  // spdlog's default pattern: [2024-05-01 12:34:56.123] [conv1d] [info] ...
  kJson,  // one JSON object per line (json_formatter.h)
};

// "text" or "json"; nullopt for anything else.
std::optional<LogFormat> ParseLogFormat(std::string_view name);
// trace, debug, info, warn, error, critical or off; nullopt for anything else.
std::optional<spdlog::level::level_enum> ParseLogLevel(std::string_view name);

// A formatter for the server's log in `format`.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format);

void ConfigureLogging(LogFormat format, spdlog::level::level_enum level);

}  // namespace conv1d

#endif  // CONV1D_SERVER_LOGGING_LOG_SETUP_H_
