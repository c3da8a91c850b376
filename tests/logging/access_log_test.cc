// AccessLog: lines in both formats, appended to a file and written out by
// the destructor; a path that cannot be opened is refused.
#include "server/logging/access_log.h"

#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/logging/json_line.h"

namespace conv1d {
namespace {

using testing::IsRfc3339MicrosUtc;
using testing::Lines;
using testing::NumberField;
using testing::ParseJsonLine;
using testing::StringField;

class AccessLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    path_ = absl::StrCat(::testing::TempDir(), "access_log_test_", getpid(), "_",
                         counter++, ".log");
    unlink(path_.c_str());
  }
  void TearDown() override { unlink(path_.c_str()); }
  std::string Read() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string path_;
};

AccessRecord Record(std::string_view method, std::string_view id, absl::StatusCode code) {
  AccessRecord r;
  r.peer = "ipv4:127.0.0.1:41234";
  r.method = method;
  r.request_id = id;
  r.code = code;
  r.latency_us = 812;
  r.request_bytes = 1090;
  r.response_bytes = code == absl::StatusCode::kOk ? 1040 : 0;
  return r;
}

TEST_F(AccessLogTest, JsonLinesCarryEveryField) {
  {
    absl::StatusOr<std::unique_ptr<AccessLog>> log = AccessLog::Create(path_, LogFormat::kJson);
    ASSERT_TRUE(log.ok()) << log.status();
    (*log)->Record(Record("Forward", "abc-1", absl::StatusCode::kOk));
    // Escaping holds even for fields a peer could influence.
    AccessRecord odd = Record("Backward", "id \"quoted\"\n", absl::StatusCode::kInvalidArgument);
    odd.peer = "unix:/tmp/a \"b\"";
    (*log)->Record(odd);
    EXPECT_EQ((*log)->dropped_lines(), 0);
  }  // the destructor writes out the queue
  const std::vector<std::string> lines = Lines(Read());
  ASSERT_EQ(lines.size(), 2u) << Read();
  absl::StatusOr<google::protobuf::Struct> first = ParseJsonLine(lines[0]);
  ASSERT_TRUE(first.ok()) << first.status() << "\n" << lines[0];
  EXPECT_TRUE(IsRfc3339MicrosUtc(StringField(*first, "ts")));
  EXPECT_EQ(StringField(*first, "logger"), "access");
  EXPECT_EQ(StringField(*first, "peer"), "ipv4:127.0.0.1:41234");
  EXPECT_EQ(StringField(*first, "method"), "Forward");
  EXPECT_EQ(StringField(*first, "request_id"), "abc-1");
  EXPECT_EQ(StringField(*first, "code"), "OK");
  EXPECT_EQ(NumberField(*first, "latency_us"), 812);
  EXPECT_EQ(NumberField(*first, "request_bytes"), 1090);
  EXPECT_EQ(NumberField(*first, "response_bytes"), 1040);
  absl::StatusOr<google::protobuf::Struct> second = ParseJsonLine(lines[1]);
  ASSERT_TRUE(second.ok()) << second.status() << "\n" << lines[1];
  EXPECT_EQ(StringField(*second, "peer"), "unix:/tmp/a \"b\"");
  EXPECT_EQ(StringField(*second, "request_id"), "id \"quoted\"\n");
  EXPECT_EQ(StringField(*second, "code"), "INVALID_ARGUMENT");
  EXPECT_EQ(NumberField(*second, "response_bytes"), 0);
}

TEST_F(AccessLogTest, TextLinesAndAppending) {
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::unique_ptr<AccessLog>> log = AccessLog::Create(path_, LogFormat::kText);
    ASSERT_TRUE(log.ok()) << log.status();
    (*log)->Record(Record("ServerInfo", absl::StrCat("r", round), absl::StatusCode::kOk));
  }
  const std::vector<std::string> lines = Lines(Read());
  ASSERT_EQ(lines.size(), 2u) << Read();
  static const std::regex kLine(
      R"((\S+) peer=ipv4:127\.0\.0\.1:41234 method=ServerInfo request_id=r(\d) code=OK )"
      R"(latency_us=812 request_bytes=1090 response_bytes=1040)");
  for (int round = 0; round < 2; ++round) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[round], m, kLine)) << lines[round];
    EXPECT_TRUE(IsRfc3339MicrosUtc(m[1]));
    EXPECT_EQ(m[2], std::to_string(round));
  }
}

TEST_F(AccessLogTest, AuditFieldsOfWeightChanges) {
  for (LogFormat format : {LogFormat::kText, LogFormat::kJson}) {
    unlink(path_.c_str());
    {
      absl::StatusOr<std::unique_ptr<AccessLog>> log = AccessLog::Create(path_, format);
      ASSERT_TRUE(log.ok()) << log.status();
      AccessRecord r = Record("RegisterWeights", "a-1", absl::StatusCode::kPermissionDenied);
      r.principal = "bob";
      r.action = "replace";
      r.weights = "team/m.v2";
      (*log)->Record(r);
      AccessRecord plain = Record("Forward", "a-2", absl::StatusCode::kOk);
      plain.principal = "alice";
      (*log)->Record(plain);
      (*log)->Record(Record("Forward", "a-3", absl::StatusCode::kOk));  // no auth
    }
    const std::vector<std::string> lines = Lines(Read());
    ASSERT_EQ(lines.size(), 3u) << Read();
    if (format == LogFormat::kText) {
      EXPECT_TRUE(absl::EndsWith(lines[0], " code=PERMISSION_DENIED latency_us=812 "
                                           "request_bytes=1090 response_bytes=0 principal=bob "
                                           "action=replace weights=team/m.v2"))
          << lines[0];
      EXPECT_TRUE(absl::EndsWith(lines[1], "response_bytes=1040 principal=alice")) << lines[1];
      EXPECT_TRUE(absl::EndsWith(lines[2], "response_bytes=1040")) << lines[2];
    } else {
      absl::StatusOr<google::protobuf::Struct> audit = ParseJsonLine(lines[0]);
      ASSERT_TRUE(audit.ok()) << audit.status() << "\n" << lines[0];
      EXPECT_EQ(StringField(*audit, "principal"), "bob");
      EXPECT_EQ(StringField(*audit, "action"), "replace");
      EXPECT_EQ(StringField(*audit, "weights"), "team/m.v2");
      EXPECT_EQ(StringField(*audit, "code"), "PERMISSION_DENIED");
      absl::StatusOr<google::protobuf::Struct> anonymous = ParseJsonLine(lines[2]);
      ASSERT_TRUE(anonymous.ok());
      EXPECT_EQ(anonymous->fields().count("principal"), 0u);
      EXPECT_EQ(anonymous->fields().count("action"), 0u);
    }
  }
}

TEST_F(AccessLogTest, ManyThreadsManyLines) {
  constexpr int kThreads = 8, kPerThread = 500;
  {
    absl::StatusOr<std::unique_ptr<AccessLog>> log = AccessLog::Create(path_, LogFormat::kJson);
    ASSERT_TRUE(log.ok()) << log.status();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const std::string id = absl::StrCat(t, "-", i);
          (*log)->Record(Record("Forward", id, absl::StatusCode::kOk));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ((*log)->dropped_lines(), 0);  // 4000 lines < the queue
  }
  const std::vector<std::string> lines = Lines(Read());
  ASSERT_EQ(lines.size(), size_t{kThreads * kPerThread});
  for (const std::string& line : lines) {
    ASSERT_TRUE(ParseJsonLine(line).ok()) << line;
  }
}

TEST_F(AccessLogTest, UnopenablePathIsRefused) {
  absl::StatusOr<std::unique_ptr<AccessLog>> log =
      AccessLog::Create("/nonexistent-dir/access.log", LogFormat::kText);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(log.status().message().find("/nonexistent-dir/access.log"), std::string::npos);
}

}  // namespace
}  // namespace conv1d
