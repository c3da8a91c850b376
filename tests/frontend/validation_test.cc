// Validation without a server: inputs are views into the request (no
// copies), outputs are bound into the response, width-1 states, limits.
#include "server/frontend/validation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

TEST(Validation, InputsAreViewsIntoTheRequestAndOutputsIntoTheResponse) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 1);
  Rng rng(test_seed);
  Case c;
  c.op = Op::kBackward;
  c.x_dtype = DType::kBF16;
  c.w_dtype = DType::kF16;
  c.grad_fp32 = true;
  c.layout = Layout::kChannelLast;
  c.batch = 3;
  c.dim = 5;
  c.seqlen = 7;
  c.width = 4;
  c.bias = c.initial_states = c.dfinal_states = c.dinitial_states = true;
  const Inputs in = MakeInputs(c, &rng);
  const v1::BackwardRequest request = MakeBackward(c, in);
  WeightRegistry registry;
  ValidatedCall call;
  ASSERT_TRUE(ValidateBackward(request, registry, ValidationLimits(), &call).ok());
  const ConvSegment& s = call.segment;
  EXPECT_EQ(s.x.data, request.x().data().data());
  EXPECT_EQ(s.dout.data, request.dout().data().data());
  EXPECT_EQ(s.weight.data, request.inline_weights().weight().data().data());
  EXPECT_EQ(s.bias.data, request.inline_weights().bias().data().data());
  EXPECT_EQ(s.initial_states.data, request.initial_states().data().data());
  EXPECT_EQ(s.dfinal_states.data, request.dfinal_states().data().data());
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seqlen, 7);
  EXPECT_EQ(call.key.dim, 5);
  EXPECT_EQ(call.key.layout, Layout::kChannelLast);
  EXPECT_EQ(call.key.x_dtype, DType::kBF16);
  EXPECT_EQ(call.key.weight_dtype, DType::kF16);
  EXPECT_EQ(call.key.grad_weight_dtype, DType::kF32);
  EXPECT_TRUE(call.key.has_bias && call.key.has_initial_states &&
              call.key.has_dfinal_states && call.key.return_dinitial_states);
  EXPECT_FALSE(s.dx.present());  // no storage before binding

  v1::BackwardResponse response;
  BindBackwardResponse(&call, &response);
  EXPECT_EQ(s.dx.data, response.dx().data().data());
  EXPECT_EQ(s.dweight.data, response.dweight().data().data());
  EXPECT_EQ(response.dx().data().size(), 3u * 7 * 5 * 2);
  EXPECT_THAT(response.dx().shape(), ::testing::ElementsAre(3, 7, 5));
  EXPECT_EQ(response.dweight().dtype(), v1::FP32);
  EXPECT_EQ(response.dweight().data().size(), 5u * 4 * 4);
  EXPECT_EQ(response.dbias().data().size(), 5u * 4);
  EXPECT_THAT(response.dinitial_states().shape(), ::testing::ElementsAre(3, 5, 3));
  // Inputs: x, dout 2*105*2, weight 20*2, bias 5*2, two states 45*2 each;
  // outputs: dx 210, dweight 80, dbias 20, dinitial_states 90.
  EXPECT_EQ(call.total_bytes, 420 + 40 + 10 + 180 + 210 + 80 + 20 + 90);
}

TEST(Validation, WidthOneStatesHaveZeroColumnsAndNeverReachTheBackend) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 2);
  Rng rng(test_seed);
  Case c;
  c.width = 1;
  c.initial_states = c.final_states = true;
  const Inputs in = MakeInputs(c, &rng);
  const v1::ForwardRequest request = MakeForward(c, in);
  ASSERT_EQ(request.initial_states().data().size(), 0u);
  WeightRegistry registry;
  ValidatedCall call;
  ASSERT_TRUE(ValidateForward(request, registry, ValidationLimits(), &call).ok());
  EXPECT_FALSE(call.key.has_initial_states);
  EXPECT_FALSE(call.key.return_final_states);
  EXPECT_FALSE(call.segment.initial_states.present());
  v1::ForwardResponse response;
  BindForwardResponse(&call, &response);
  EXPECT_TRUE(response.has_final_states());
  EXPECT_THAT(response.final_states().shape(), ::testing::ElementsAre(1, 8, 0));
  EXPECT_FALSE(call.segment.final_states.present());
}

TEST(Validation, RegisteredWeightsAreHeldByTheCall) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 3);
  Rng rng(test_seed);
  WeightRegistry registry;
  Case c;
  c.bias = true;
  const Inputs in = MakeInputs(c, &rng);
  ASSERT_TRUE(registry.Register("m", DType::kF32, 8, 4, in.weight.data(), in.bias.data(), false).ok());
  c.weights_name = "m";
  v1::UpdateRequest request;
  c.op = Op::kUpdate;
  c.seqlen = 2;
  c.state_len = 5;
  const Inputs upd = MakeInputs(c, &rng);
  request = MakeUpdate(c, upd);
  ValidatedCall call;
  ASSERT_TRUE(ValidateUpdate(request, registry, ValidationLimits(), &call).ok());
  ASSERT_NE(call.weights, nullptr);
  ASSERT_TRUE(registry.Unregister("m").ok());
  // The set outlives its registration while the call holds it.
  EXPECT_EQ(std::string(static_cast<const char*>(call.segment.weight.data),
                        call.segment.weight.bytes),
            in.weight.data());
  EXPECT_EQ(call.segment.state_len, 5);
  EXPECT_TRUE(call.key.has_bias);
  EXPECT_THAT(ValidateUpdate(request, registry, ValidationLimits(), &call).message(),
              HasSubstr("weights_name \"m\" is not registered"));
}

TEST(Validation, RequestSizeLimit) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 4);
  Rng rng(test_seed);
  Case c;
  const Inputs in = MakeInputs(c, &rng);
  WeightRegistry registry;
  ValidatedCall call;
  ASSERT_TRUE(ValidateForward(MakeForward(c, in), registry, ValidationLimits(), &call).ok());
  ValidationLimits limits;
  limits.max_request_bytes = call.total_bytes;
  EXPECT_TRUE(CheckRequestSize(call, limits).ok());
  limits.max_request_bytes = call.total_bytes - 1;
  EXPECT_EQ(CheckRequestSize(call, limits).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace conv1d::e2e
