// The real conv1d_server binary's logs: with --log_format=json every line it
// writes is a JSON object; at debug level each call has a line naming its
// request id (the one returned in the `x-request-id` trailer, or the
// client's own, sanitized); --access_log has exactly one line per call with
// its code. And the text formats, access log on stderr included.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/server_process.h"
#include "tests/logging/json_line.h"

namespace conv1d::e2e {
namespace {

using ::conv1d::testing::IsRfc3339MicrosUtc;
using ::conv1d::testing::Lines;
using ::conv1d::testing::NumberField;
using ::conv1d::testing::ParseJsonLine;
using ::conv1d::testing::StringField;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The request id a call got back; "" when the trailer is missing.
std::string RequestIdTrailer(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find("x-request-id");
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// Stops the server with SIGTERM and returns its exit status. Health checks
// keep the channel busy meanwhile: an idle channel held open slows the
// drain's GOAWAY by seconds (see binary_test.cc); they are not Conv1d calls,
// so they add no log lines.
int Stop(ServerProcess* server, grpc::Channel* channel) {
  if (kill(server->pid(), SIGTERM) != 0) return -3;
  int code = -1;
  for (int i = 0; i < 200 && code == -1; ++i) {
    (void)HealthCheck(channel, "", absl::Milliseconds(50));
    code = server->Wait(absl::Milliseconds(50));
  }
  return code;
}

// What one call sent and got: its method, code and request id.
struct Sent {
  std::string method;
  grpc::StatusCode code;
  std::string request_id;  // from the trailer; "" for the raw call
};

TEST(ServerLogging, JsonLogsRequestIdsAndAccessLog) {
  const std::string access_path =
      absl::StrCat(::testing::TempDir(), "conv1d_access_", getpid(), ".log");
  unlink(access_path.c_str());
  ServerProcess server({"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                        "--threads=1", "--drain_grace_ms=0", "--log_format=json",
                        "--log_level=debug", "--access_log=" + access_path});
  ASSERT_TRUE(server.started());
  const int port = server.WaitForPort(absl::Seconds(20));
  ASSERT_NE(port, 0) << server.Log();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", port));
  auto stub = v1::Conv1d::NewStub(channel);

  CONV1D_TEST_SEED_SCOPE(test_seed, 5);
  Rng rng(test_seed);
  Case c;
  c.dim = 8;
  c.seqlen = 16;
  c.bias = true;
  const Inputs in = MakeInputs(c, &rng);
  std::vector<Sent> sent;
  auto forward = [&](const v1::ForwardRequest& request, const std::string& client_id) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    if (!client_id.empty()) context.AddMetadata("x-request-id", client_id);
    v1::ForwardResponse response;
    const grpc::Status status = stub->Forward(&context, request, &response);
    sent.push_back({"Forward", status.error_code(), RequestIdTrailer(context)});
    return status;
  };

  // 1: a good request, the server makes up its id.
  ASSERT_TRUE(forward(MakeForward(c, in), "").ok());
  // 2: a good request with the client's id, kept as it is. Its x carries a
  // marker that must not appear in any log.
  v1::ForwardRequest marked = MakeForward(c, in);
  std::string marker_data;
  while (marker_data.size() < marked.x().data().size()) marker_data += "TENSORDATA";
  marker_data.resize(marked.x().data().size());
  marked.mutable_x()->set_data(marker_data);
  ASSERT_TRUE(forward(marked, "client-id-42").ok());
  // 3: bad input (weight of the wrong D), with an id to sanitize.
  v1::ForwardRequest bad = MakeForward(c, in);
  bad.mutable_inline_weights()->mutable_weight()->set_shape(0, 7);
  EXPECT_EQ(forward(bad, "bad id \"<x>\"").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // 4: an inline call.
  {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    ASSERT_TRUE(stub->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
    sent.push_back({"ServerInfo", grpc::StatusCode::OK, RequestIdTrailer(context)});
  }
  // 5: bytes that do not parse (the raw call sees no trailers).
  const grpc::Status raw = RawUnaryCall(channel.get(), "/conv1d.v1.Conv1d/Forward",
                                        std::string("\xff\xff\xff", 3), nullptr);
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  sent.push_back({"Forward", raw.error_code(), ""});

  ASSERT_EQ(sent.size(), 5u);
  EXPECT_THAT(sent[0].request_id, ::testing::MatchesRegex("[0-9a-f]{8}-[0-9]+"));
  EXPECT_EQ(sent[1].request_id, "client-id-42");
  EXPECT_EQ(sent[2].request_id, "bad_id___x__");
  EXPECT_NE(sent[3].request_id, "");
  EXPECT_NE(sent[3].request_id, sent[0].request_id);

  ASSERT_EQ(Stop(&server, channel.get()), 0) << server.Log();

  // Every line the server wrote (stdout and stderr) is a JSON log record.
  const std::string log = server.Log();
  std::map<std::string, std::string> debug_line_by_id;
  std::regex id_re(R"(finished: request_id=(\S+) )");
  int records = 0;
  for (const std::string& line : Lines(log)) {
    absl::StatusOr<google::protobuf::Struct> object = ParseJsonLine(line);
    ASSERT_TRUE(object.ok()) << object.status() << "\n" << line;
    ++records;
    EXPECT_TRUE(IsRfc3339MicrosUtc(StringField(*object, "ts"))) << line;
    EXPECT_NE(StringField(*object, "level"), "") << line;
    EXPECT_NE(StringField(*object, "logger"), "") << line;
    const std::string msg = StringField(*object, "msg");
    std::smatch m;
    if (std::regex_search(msg, m, id_re)) {
      EXPECT_EQ(StringField(*object, "level"), "debug") << line;
      debug_line_by_id[m[1]] = msg;
    }
  }
  EXPECT_GE(records, 3) << log;  // startup, draining, stopped at least
  EXPECT_THAT(log, HasSubstr("serving: backend=cpu"));

  // One debug line per call; the trailer's id is the one in the line.
  EXPECT_EQ(debug_line_by_id.size(), 5u) << log;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(debug_line_by_id.count(sent[i].request_id), 1u)
        << sent[i].request_id << "\n" << log;
  }
  const std::string& ok_line = debug_line_by_id[sent[1].request_id];
  EXPECT_THAT(ok_line, StartsWith("Forward finished: request_id=client-id-42 peer=ipv4:"));
  EXPECT_THAT(ok_line, HasSubstr(" code=OK latency_us="));
  EXPECT_THAT(ok_line, HasSubstr("tensors: x=fp32[1,8,16] weight=fp32[8,4] bias=fp32[8]"));
  const std::string& bad_line = debug_line_by_id[sent[2].request_id];
  EXPECT_THAT(bad_line, HasSubstr(" code=INVALID_ARGUMENT "));
  EXPECT_THAT(bad_line, HasSubstr("weight=fp32[7,4]"));
  EXPECT_THAT(bad_line, HasSubstr(" error=\""));
  EXPECT_THAT(debug_line_by_id[sent[3].request_id],
              StartsWith("ServerInfo finished: request_id="));

  // The access log: one line per call, in order, with its code and id.
  const std::string access_text = ReadFile(access_path);
  unlink(access_path.c_str());
  EXPECT_THAT(log, Not(HasSubstr("TENSORDATA")));
  EXPECT_THAT(access_text, Not(HasSubstr("TENSORDATA")));
  const std::vector<std::string> access = Lines(access_text);
  ASSERT_EQ(access.size(), sent.size()) << access_text;
  for (size_t i = 0; i < access.size(); ++i) {
    absl::StatusOr<google::protobuf::Struct> object = ParseJsonLine(access[i]);
    ASSERT_TRUE(object.ok()) << object.status() << "\n" << access[i];
    EXPECT_TRUE(IsRfc3339MicrosUtc(StringField(*object, "ts"))) << access[i];
    EXPECT_EQ(StringField(*object, "logger"), "access");
    EXPECT_THAT(StringField(*object, "peer"), StartsWith("ipv4:127.0.0.1:"));
    EXPECT_EQ(StringField(*object, "method"), sent[i].method) << access[i];
    EXPECT_EQ(StringField(*object, "code"),
              absl::StatusCodeToString(static_cast<absl::StatusCode>(sent[i].code)))
        << access[i];
    if (!sent[i].request_id.empty()) {
      EXPECT_EQ(StringField(*object, "request_id"), sent[i].request_id);
    } else {
      EXPECT_NE(StringField(*object, "request_id"), "");
    }
    EXPECT_GE(NumberField(*object, "latency_us"), 0) << access[i];
    const bool ok = sent[i].code == grpc::StatusCode::OK;
    EXPECT_EQ(NumberField(*object, "response_bytes") > 0, ok) << access[i];
    if (sent[i].method == "Forward") {
      EXPECT_GT(NumberField(*object, "request_bytes"), 0) << access[i];
    }
  }
}

TEST(ServerLogging, TextAccessLogOnStderr) {
  ServerProcess server({"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=echo",
                        "--drain_grace_ms=0", "--access_log=-"});
  ASSERT_TRUE(server.started());
  const int port = server.WaitForPort(absl::Seconds(20));
  ASSERT_NE(port, 0) << server.Log();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", port));
  auto stub = v1::Conv1d::NewStub(channel);
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.AddMetadata("x-request-id", "text-1");
  v1::ServerInfoResponse info;
  ASSERT_TRUE(stub->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
  EXPECT_EQ(RequestIdTrailer(context), "text-1");
  ASSERT_EQ(Stop(&server, channel.get()), 0) << server.Log();

  const std::string log = server.Log();
  // The server's own lines keep spdlog's text pattern, with the logger name.
  EXPECT_THAT(log, HasSubstr("] [conv1d] [info] conv1d_server "));
  // At the default level there is no per-call debug line...
  EXPECT_THAT(log, Not(HasSubstr("finished: request_id=")));
  // ...but the access log line is there, once.
  static const std::regex kAccess(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z peer=ipv4:127\.0\.0\.1:\d+ method=ServerInfo )"
      R"(request_id=text-1 code=OK latency_us=\d+ request_bytes=0 response_bytes=\d+)");
  int access_lines = 0;
  for (const std::string& line : Lines(log)) {
    if (line.find("request_id=") == std::string::npos) continue;
    ++access_lines;
    EXPECT_TRUE(std::regex_match(line, kAccess)) << line;
  }
  EXPECT_EQ(access_lines, 1) << log;
}

}  // namespace
}  // namespace conv1d::e2e

namespace conv1d::e2e {
namespace {

// A client can make the libraries log (protobuf logs an ERROR for every
// string field that is not UTF-8): 200 such requests leave at most the
// per-source burst of those lines, then a count of the rest.
TEST(ServerLogging, ClientTriggeredLibraryLinesAreRateLimited) {
  ServerProcess server({"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=echo",
                        "--drain_grace_ms=0"});
  ASSERT_TRUE(server.started());
  const int port = server.WaitForPort(absl::Seconds(20));
  ASSERT_NE(port, 0) << server.Log();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", port));
  auto stub = v1::Conv1d::NewStub(channel);
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    v1::UnregisterWeightsRequest req;
    req.set_name(std::string("bad\xff\xfe name ") + std::to_string(i));
    v1::UnregisterWeightsResponse resp;
    const grpc::Status st = stub->UnregisterWeights(&context, req, &resp);
    ASSERT_FALSE(st.ok()) << i;
  }
  ASSERT_EQ(Stop(&server, channel.get()), 0) << server.Log();
  int utf8_lines = 0;
  for (const std::string& line : Lines(server.Log())) {
    if (line.find("UTF-8") != std::string::npos) ++utf8_lines;
  }
  EXPECT_GE(utf8_lines, 1) << server.Log();
  EXPECT_LE(utf8_lines, 10) << server.Log();
}

}  // namespace
}  // namespace conv1d::e2e
