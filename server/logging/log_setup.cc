#include "server/logging/log_setup.h"

#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "server/logging/json_formatter.h"
#include "server/logging/log_rate_limit.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace conv1d {
namespace {

// gRPC and protobuf may log from their own threads until the very end of
// the process, so the loggers and the limiter they use are never destroyed
// (see ConfigureLogging).
std::atomic<spdlog::logger*> g_grpc_logger{nullptr};
std::atomic<spdlog::logger*> g_protobuf_logger{nullptr};
LogRateLimiter* const g_library_limiter = new LogRateLimiter();

// Writes a library's line through `logger`, within the per-source limit.
void LogLibraryLine(spdlog::logger* logger, spdlog::level::level_enum level, const char* file,
                    int line, const std::string& message) {
  if (logger == nullptr || !logger->should_log(level)) return;
  const LogRateLimiter::Verdict v = g_library_limiter->Admit(file, line, absl::Now());
  if (v.suppressed > 0) {
    logger->log(level, "{}:{}: {} similar lines suppressed in the last window",
                file != nullptr ? file : "?", line, v.suppressed);
  }
  if (v.write) logger->log(level, "{}:{}: {}", file != nullptr ? file : "?", line, message);
}

void LogGrpcMessage(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  LogLibraryLine(g_grpc_logger.load(std::memory_order_acquire), level, args->file, args->line,
                 args->message != nullptr ? args->message : "");
}

void LogProtobufMessage(google::protobuf::LogLevel severity, const char* file, int line,
                        const std::string& message) {
  spdlog::level::level_enum level = spdlog::level::err;
  if (severity == google::protobuf::LOGLEVEL_INFO) level = spdlog::level::info;
  if (severity == google::protobuf::LOGLEVEL_WARNING) level = spdlog::level::warn;
  if (severity == google::protobuf::LOGLEVEL_FATAL) level = spdlog::level::critical;
  LogLibraryLine(g_protobuf_logger.load(std::memory_order_acquire), level, file, line, message);
}

}  // namespace

std::optional<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::optional<spdlog::level::level_enum> ParseLogLevel(std::string_view name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(std::string(name));
  // from_str answers `off` for every name it does not know.
  if (level == spdlog::level::off && name != "off") return std::nullopt;
  return level;
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  return std::make_unique<spdlog::pattern_formatter>();
}

void ConfigureLogging(LogFormat format, spdlog::level::level_enum level) {
  // Colours only help a person at a terminal (the colour sink checks
  // isatty); JSON goes to collectors, which want no escape codes.
  spdlog::sink_ptr sink;
  if (format == LogFormat::kJson) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  }
  sink->set_formatter(MakeLogFormatter(format));

  auto logger = std::make_shared<spdlog::logger>("conv1d", sink);
  logger->set_level(level);
  spdlog::set_default_logger(logger);

  // Leaked on purpose: see g_grpc_logger.
  auto* grpc_logger = new spdlog::logger("grpc", sink);
  grpc_logger->set_level(level);
  spdlog::logger* previous = g_grpc_logger.exchange(grpc_logger, std::memory_order_acq_rel);
  (void)previous;  // an earlier configuration's logger stays alive too
  gpr_set_log_function(LogGrpcMessage);

  auto* protobuf_logger = new spdlog::logger("protobuf", sink);
  protobuf_logger->set_level(level);
  previous = g_protobuf_logger.exchange(protobuf_logger, std::memory_order_acq_rel);
  google::protobuf::SetLogHandler(LogProtobufMessage);
}

}  // namespace conv1d
