// JSON log lines for spdlog: JsonFormatter renders each log record as one
// JSON object on one line, for log collectors that parse rather than grep:
//
//   {"ts":"2024-05-01T12:34:56.123456Z","level":"info","logger":"conv1d",
//    "thread":4711,"msg":"conv1d_server 0.1.0 serving: ..."}
//
// `ts` is RFC 3339 in UTC with microseconds; `level` is spdlog's name
// (trace, debug, info, warning, error, critical); `msg` is the formatted
// message, escaped so that any bytes (quotes, newlines, control characters,
// invalid UTF-8 from a client's string) still give one valid JSON line.
//
// Used by log_setup.cc for --log_format=json and by the access log, which
// shares the timestamp and the escaping.
//
// Thread-safety: the free functions are pure. A JsonFormatter has no mutable
// state; spdlog calls format() under its sink's lock and clone()s one per
// sink.
#ifndef CONV1D_SERVER_LOGGING_JSON_FORMATTER_H_
#define CONV1D_SERVER_LOGGING_JSON_FORMATTER_H_

#include <chrono>
#include <memory>
#include <string_view>

#include "spdlog/formatter.h"

namespace conv1d {

// Appends `text` to `out` as the inside of a JSON string (no quotes): `"`
// and `\` escaped, control characters as \n, \r, \t, \b, \f or \u00XX, DEL
// as \u007f, valid UTF-8 kept as it is, every byte of an invalid UTF-8
// sequence as U+FFFD.
void AppendJsonEscaped(std::string_view text, spdlog::memory_buf_t* out);

// Appends `time` as RFC 3339 UTC with microseconds: 2024-05-01T12:34:56.123456Z.
void AppendRfc3339Utc(std::chrono::system_clock::time_point time,
                      spdlog::memory_buf_t* out);

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_LOGGING_JSON_FORMATTER_H_
