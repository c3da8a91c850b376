#include "server/logging/access_log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/logging/json_formatter.h"
#include "spdlog/details/null_mutex.h"
#include "spdlog/sinks/base_sink.h"

namespace conv1d {
namespace {

void Append(std::string_view s, spdlog::memory_buf_t* out) {
  out->append(s.data(), s.data() + s.size());
}

// Record() renders everything but the time; this adds the time the line was
// recorded (not written) and closes the line.
class AccessLineFormatter final : public spdlog::formatter {
 public:
  explicit AccessLineFormatter(LogFormat format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view fields(msg.payload.data(), msg.payload.size());
    if (format_ == LogFormat::kJson) {
      Append("{\"ts\":\"", &dest);
      AppendRfc3339Utc(msg.time, &dest);
      Append("\",\"logger\":\"access\",", &dest);
      Append(fields, &dest);
      Append("}\n", &dest);
    } else {
      AppendRfc3339Utc(msg.time, &dest);
      dest.push_back(' ');
      Append(fields, &dest);
      dest.push_back('\n');
    }
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<AccessLineFormatter>(format_);
  }

 private:
  const LogFormat format_;
};

// Writes and flushes each line, so that whoever follows the file (tail -f,
// a collector) sees a request as soon as it is written. Only the writer
// thread calls it, hence no lock of its own; a line is one fwrite, which
// stdio does not interleave with other writers of the same FILE (stderr).
class LineFlushingSink final
    : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  LineFlushingSink(std::FILE* file, bool owned, LogFormat format)
      : base_sink(std::make_unique<AccessLineFormatter>(format)),
        file_(file),
        owned_(owned) {}
  ~LineFlushingSink() override {
    if (owned_) std::fclose(file_);
  }

 private:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
  }
  void flush_() override { std::fflush(file_); }

  std::FILE* const file_;
  const bool owned_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Create(const std::string& path,
                                                             LogFormat format) {
  std::FILE* file = stderr;
  const bool owned = path != "-";
  if (owned) {
    file = std::fopen(path.c_str(), "a");
    if (file == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open '", path, "' for appending: ", std::strerror(errno)));
    }
  }
  auto sink = std::make_shared<LineFlushingSink>(file, owned, format);
  try {
    auto writer = std::make_shared<spdlog::details::thread_pool>(kQueueLines, 1);
    // Dropping the oldest lines keeps a slow disk from stalling request
    // threads, which must never block.
    auto logger = std::make_shared<spdlog::async_logger>(
        "access", std::move(sink), writer, spdlog::async_overflow_policy::overrun_oldest);
    logger->set_level(spdlog::level::info);
    return std::unique_ptr<AccessLog>(
        new AccessLog(format, std::move(writer), std::move(logger)));
  } catch (const std::exception& e) {  // e.g. the writer thread could not start
    return absl::ResourceExhaustedError(
        absl::StrCat("access log writer thread: ", e.what()));
  }
}

AccessLog::~AccessLog() {
  // Queued lines hold the logger; the writer's destructor (after this body,
  // members in reverse order) writes them out and joins its thread.
  logger_.reset();
}

void AccessLog::Record(const AccessRecord& r) {
  // No tensor data reaches this line: only names, codes and sizes.
  spdlog::memory_buf_t fields;
  auto out = std::back_inserter(fields);
  const std::string code = absl::StatusCodeToString(r.code);
  if (format_ == LogFormat::kJson) {
    Append("\"peer\":\"", &fields);
    AppendJsonEscaped(r.peer, &fields);
    Append("\",\"method\":\"", &fields);
    AppendJsonEscaped(r.method, &fields);
    Append("\",\"request_id\":\"", &fields);
    AppendJsonEscaped(r.request_id, &fields);
    fmt::format_to(out,
                   "\",\"code\":\"{}\",\"latency_us\":{},\"request_bytes\":{},"
                   "\"response_bytes\":{}",
                   code, r.latency_us, r.request_bytes, r.response_bytes);
    for (const auto& [key, value] : {std::pair<const char*, std::string_view>{"principal", r.principal},
                                     {"action", r.action}, {"weights", r.weights}}) {
      if (value.empty()) continue;
      fmt::format_to(out, ",\"{}\":\"", key);
      AppendJsonEscaped(value, &fields);
      Append("\"", &fields);
    }
  } else {
    // The request id is sanitized by the frontend and the peer comes from
    // gRPC, so neither can break the line.
    fmt::format_to(out,
                   "peer={} method={} request_id={} code={} latency_us={} "
                   "request_bytes={} response_bytes={}",
                   r.peer, r.method, r.request_id, code, r.latency_us, r.request_bytes,
                   r.response_bytes);
    // Principals and set names are checked against narrow character sets
    // (auth.h, weight_registry.h), so they cannot break the line either.
    if (!r.principal.empty()) fmt::format_to(out, " principal={}", r.principal);
    if (!r.action.empty()) fmt::format_to(out, " action={} weights={}", r.action, r.weights);
  }
  logger_->log(spdlog::level::info, spdlog::string_view_t(fields.data(), fields.size()));
}

int64_t AccessLog::dropped_lines() const {
  return static_cast<int64_t>(writer_->overrun_counter());
}

}  // namespace conv1d
