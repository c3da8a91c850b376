// The real conv1d_server binary and decode sessions: on SIGTERM an open
// Decode stream receives its session's state and then UNAVAILABLE, and the
// process still exits 0 within the drain bound.
#include <signal.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/server_process.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

TEST(ServerBinary, SigtermSendsEachDecodeStreamItsState) {
  ServerProcess p({"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                   "--threads=1", "--drain_grace_ms=100", "--drain_timeout_s=10",
                   "--max_sessions=4"});
  ASSERT_TRUE(p.started());
  ASSERT_NE(p.WaitForPort(absl::Seconds(20)), 0) << p.Log();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(absl::StrCat("127.0.0.1:", p.Port()));
  auto stub = v1::Conv1d::NewStub(channel);
  CONV1D_TEST_SEED_SCOPE(test_seed, 17);
  Rng rng(test_seed);
  const int64_t b = 1, d = 8, len = 12;
  const v1::Tensor x = RandomTensor(DType::kF32, {b, d, len}, &rng);
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto stream = stub->Decode(ctx.get());
  v1::DecodeRequest open;
  v1::OpenSessionRequest* o = open.mutable_open();
  *o->mutable_inline_weights()->mutable_weight() = RandomTensor(DType::kF32, {d, 4}, &rng);
  o->set_dtype(v1::FP32);
  o->set_batch(b);
  *o->mutable_prefill() = x;
  v1::DecodeResponse resp;
  ASSERT_TRUE(stream->Write(open) && stream->Read(&resp));
  ASSERT_EQ(resp.open().y().shape_size(), 3);

  ASSERT_EQ(kill(p.pid(), SIGTERM), 0);
  v1::DecodeResponse last;
  ASSERT_TRUE(stream->Read(&last));
  EXPECT_TRUE(last.draining());
  // The state is the last W-1 = 3 inputs of every row.
  std::string want;
  for (int64_t r = 0; r < b * d; ++r) want.append(x.data(), (r * len + len - 3) * 4, 3 * 4);
  EXPECT_EQ(last.export_state().conv_state().data(), want);
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::UNAVAILABLE) << st.error_message();
  // A client that keeps an ended call keeps the server's last read open
  // until the drain deadline; this one lets it go, as DecodeSession does.
  stream.reset();
  ctx.reset();
  EXPECT_EQ(p.Wait(absl::Seconds(15)), 0) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr("1 Decode streams sent their state"));
}

}  // namespace
}  // namespace conv1d::e2e
