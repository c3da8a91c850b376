// An injected GPU fault (GpuBackendOptions::inject_fault) fails only the
// batch it strikes: the other requests are answered correctly, the server
// stays SERVING and goes on. Needs a device: skipped without one.
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "server/frontend/backend_factory.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

TEST(GpuFaultTest, InjectedLaunchFaultFailsOnlyItsBatch) {
  if (!GpuBackendBuilt() || VisibleGpuDevices() == 0) GTEST_SKIP() << "no GPU device";
  CONV1D_TEST_SEED_SCOPE(test_seed, 7);
  for (const char* fault : {"launch:3", "copy:3"}) {
    SCOPED_TRACE(fault);
    ServerOptions options;
    options.backend.name = "gpu";
    options.backend.lanes = 1;  // one lane: every third batch fails
    options.backend.inject_fault = fault;
    TestServer ts;
    StartTestServer(std::move(options), &ts);
    Rng rng(test_seed);
    int failed = 0, good = 0;
    for (int i = 1; i <= 9; ++i) {
      Case c;
      c.batch = 2;
      c.dim = 64;
      c.seqlen = 100 + i;
      c.bias = true;
      const Inputs in = MakeInputs(c, &rng);
      grpc::ClientContext context;
      v1::ForwardResponse response;
      const grpc::Status s = ts.stub->Forward(&context, MakeForward(c, in), &response);
      if (i % 3 == 0) {
        EXPECT_FALSE(s.ok()) << "request " << i;
        failed += !s.ok();
      } else {
        ASSERT_TRUE(s.ok()) << "request " << i << ": " << s.error_message();
        EXPECT_EQ(CheckForward(c, in, response), "") << "request " << i;
        ++good;
      }
      EXPECT_EQ(HealthCheck(ts.channel.get()), 1) << "SERVING after request " << i;
    }
    EXPECT_EQ(failed, 3);
    EXPECT_EQ(good, 6);
  }
}

}  // namespace
}  // namespace conv1d::e2e
