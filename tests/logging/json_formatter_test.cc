// JsonFormatter and its helpers: escaping of every kind of awkward byte,
// the RFC 3339 timestamp, and whole log lines through a real spdlog logger,
// each of which must parse as JSON and give back the exact message.
#include "server/logging/json_formatter.h"

#include <chrono>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/logging/log_setup.h"
#include "spdlog/logger.h"
#include "spdlog/sinks/ostream_sink.h"
#include "tests/logging/json_line.h"

namespace conv1d {
namespace {

using testing::IsRfc3339MicrosUtc;
using testing::Lines;
using testing::ParseJsonLine;
using testing::StringField;

std::string Escaped(std::string_view text) {
  spdlog::memory_buf_t out;
  AppendJsonEscaped(text, &out);
  return std::string(out.data(), out.size());
}

TEST(JsonEscape, QuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Escaped("plain text 123"), "plain text 123");
  EXPECT_EQ(Escaped("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(Escaped("C:\\path"), "C:\\\\path");
  EXPECT_EQ(Escaped("a\nb\rc\td\be\ff"), "a\\nb\\rc\\td\\be\\ff");
  EXPECT_EQ(Escaped(std::string("nul\0x", 5)), "nul\\u0000x");
  EXPECT_EQ(Escaped("\x01\x1b[31m\x1f"), "\\u0001\\u001b[31m\\u001f");
  EXPECT_EQ(Escaped("del\x7f"), "del\\u007f");
  EXPECT_EQ(Escaped("</script>"), "</script>");
}

TEST(JsonEscape, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(Escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(Escaped("\xff"), "\\ufffd");
  EXPECT_EQ(Escaped("\xe2\x82"), "\\ufffd\\ufffd");           // truncated
  EXPECT_EQ(Escaped("\xc0\xaf"), "\\ufffd\\ufffd");           // overlong '/'
  EXPECT_EQ(Escaped("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");  // surrogate
  EXPECT_EQ(Escaped("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");  // > U+10FFFF
  EXPECT_EQ(Escaped("a\x80z"), "a\\ufffdz");
}

TEST(Rfc3339, UtcWithMicroseconds) {
  auto format = [](std::chrono::microseconds since_epoch) {
    spdlog::memory_buf_t out;
    AppendRfc3339Utc(std::chrono::system_clock::time_point(since_epoch), &out);
    return std::string(out.data(), out.size());
  };
  EXPECT_EQ(format(std::chrono::microseconds(0)), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format(std::chrono::microseconds(1714566896123456)),
            "2024-05-01T12:34:56.123456Z");
  EXPECT_EQ(format(std::chrono::microseconds(1714566896000007)),
            "2024-05-01T12:34:56.000007Z");
  EXPECT_EQ(format(std::chrono::microseconds(-1)), "1969-12-31T23:59:59.999999Z");
}

// A logger like the server's, writing into a string.
struct CapturedLogger {
  CapturedLogger() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
    sink->set_formatter(MakeLogFormatter(LogFormat::kJson));
    logger = std::make_shared<spdlog::logger>("conv1d", sink);
    logger->set_level(spdlog::level::trace);
  }
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;
};

TEST(JsonFormatter, EveryLineParsesAndGivesBackTheMessage) {
  using namespace std::string_literals;
  CapturedLogger captured;
  const std::string nasty[] = {
      "plain",
      "quote \" backslash \\ slash /",
      "two\nlines\r\nand\ttab",
      "nul \0 bell \a escape \x1b del \x7f"s,
      "{\"looks\":\"like json\"}",
      "unicode caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
      "",
  };
  for (const std::string& message : nasty) captured.logger->info("{}", message);
  captured.logger->debug("formatted {} and {}", 42, "\"quoted\"");

  const std::vector<std::string> lines = Lines(captured.out.str());
  ASSERT_EQ(lines.size(), std::size(nasty) + 1) << captured.out.str();
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::StatusOr<google::protobuf::Struct> object = ParseJsonLine(lines[i]);
    ASSERT_TRUE(object.ok()) << object.status() << "\n" << lines[i];
    EXPECT_TRUE(IsRfc3339MicrosUtc(StringField(*object, "ts"))) << lines[i];
    EXPECT_EQ(StringField(*object, "logger"), "conv1d");
    EXPECT_GT(testing::NumberField(*object, "thread"), 0);
    if (i < std::size(nasty)) {
      EXPECT_EQ(StringField(*object, "level"), "info");
      EXPECT_EQ(StringField(*object, "msg"), nasty[i]);
    } else {
      EXPECT_EQ(StringField(*object, "level"), "debug");
      EXPECT_EQ(StringField(*object, "msg"), "formatted 42 and \"quoted\"");
    }
  }
}

TEST(JsonFormatter, InvalidUtf8StillGivesValidJson) {
  CapturedLogger captured;
  captured.logger->warn("bytes \xff\xfe and \xc3");
  const std::vector<std::string> lines = Lines(captured.out.str());
  ASSERT_EQ(lines.size(), 1u);
  absl::StatusOr<google::protobuf::Struct> object = ParseJsonLine(lines[0]);
  ASSERT_TRUE(object.ok()) << object.status() << "\n" << lines[0];
  EXPECT_EQ(StringField(*object, "level"), "warning");
  EXPECT_EQ(StringField(*object, "msg"), "bytes \xef\xbf\xbd\xef\xbf\xbd and \xef\xbf\xbd");
}

TEST(LogSetup, ParsesFormatsAndLevels) {
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").has_value());
  EXPECT_FALSE(ParseLogFormat("JSON").has_value());
  EXPECT_FALSE(ParseLogFormat("").has_value());
  EXPECT_EQ(ParseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(ParseLogLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(ParseLogLevel("off"), spdlog::level::off);
  EXPECT_FALSE(ParseLogLevel("loud").has_value());
}

}  // namespace
}  // namespace conv1d
