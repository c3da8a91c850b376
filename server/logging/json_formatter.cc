#include "server/logging/json_formatter.h"

#include <time.h>

#include <cstdint>
#include <iterator>

#include "spdlog/common.h"

namespace conv1d {
namespace {

void Append(std::string_view s, spdlog::memory_buf_t* out) {
  out->append(s.data(), s.data() + s.size());
}

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence starting at text[i] (a byte >= 0x80),
// or 0 when it is not one. Overlong forms, surrogates and code points past
// U+10FFFF are invalid (RFC 3629), as strict JSON parsers require.
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) -> unsigned char {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
  };
  const unsigned char lead = byte(0);
  if (lead >= 0xC2 && lead <= 0xDF) return IsContinuation(byte(1)) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned char lo = lead == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = lead == 0xED ? 0x9F : 0xBF;
    return byte(1) >= lo && byte(1) <= hi && IsContinuation(byte(2)) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned char lo = lead == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = lead == 0xF4 ? 0x8F : 0xBF;
    return byte(1) >= lo && byte(1) <= hi && IsContinuation(byte(2)) &&
                   IsContinuation(byte(3))
               ? 4
               : 0;
  }
  return 0;
}

}  // namespace

void AppendJsonEscaped(std::string_view text, spdlog::memory_buf_t* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(text, i);
      if (n == 0) {
        Append("\\ufffd", out);
        ++i;
      } else {
        Append(text.substr(i, n), out);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': Append("\\\"", out); break;
      case '\\': Append("\\\\", out); break;
      case '\n': Append("\\n", out); break;
      case '\r': Append("\\r", out); break;
      case '\t': Append("\\t", out); break;
      case '\b': Append("\\b", out); break;
      case '\f': Append("\\f", out); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          const char escaped[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
          out->append(escaped, escaped + sizeof escaped);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
}

void AppendRfc3339Utc(std::chrono::system_clock::time_point time,
                      spdlog::memory_buf_t* out) {
  const int64_t micros =
      std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch())
          .count();
  // Floor division, so that times before 1970 still get a fraction in 0..999999.
  int64_t seconds = micros / 1000000;
  int64_t fraction = micros % 1000000;
  if (fraction < 0) {
    fraction += 1000000;
    --seconds;
  }
  const time_t t = static_cast<time_t>(seconds);
  struct tm utc;
  gmtime_r(&t, &utc);
  fmt::format_to(std::back_inserter(*out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                 utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                 utc.tm_min, utc.tm_sec, fraction);
}

void JsonFormatter::format(const spdlog::details::log_msg& msg,
                           spdlog::memory_buf_t& dest) {
  Append("{\"ts\":\"", &dest);
  AppendRfc3339Utc(msg.time, &dest);
  Append("\",\"level\":\"", &dest);
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  Append(std::string_view(level.data(), level.size()), &dest);
  Append("\",\"logger\":\"", &dest);
  AppendJsonEscaped(std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                    &dest);
  fmt::format_to(std::back_inserter(dest), "\",\"thread\":{},\"msg\":\"", msg.thread_id);
  AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), &dest);
  Append("\"}\n", &dest);
}

std::unique_ptr<spdlog::formatter> JsonFormatter::clone() const {
  return std::make_unique<JsonFormatter>();
}

}  // namespace conv1d
