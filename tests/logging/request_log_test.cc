// The frontend's request ids and request summaries: client ids sanitized and
// cut, generated ids unique, tensors described by dtype and shape only.
#include "server/frontend/request_log.h"

#include <set>
#include <string>

#include "conv1d/v1/conv1d.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"

namespace conv1d {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

TEST(RequestId, ClientIdsAreSanitizedAndCut) {
  EXPECT_EQ(SanitizeRequestId("3f2a9c10-17"), "3f2a9c10-17");
  EXPECT_EQ(SanitizeRequestId("trace:abc/def+g=h@i_j.k"), "trace:abc/def+g=h@i_j.k");
  EXPECT_EQ(SanitizeRequestId("a b\"c\nd{e}"), "a_b_c_d_e_");
  EXPECT_EQ(SanitizeRequestId("caf\xc3\xa9"), "caf__");
  EXPECT_EQ(SanitizeRequestId(""), "");
  EXPECT_EQ(SanitizeRequestId(std::string(1000, 'x')), std::string(kMaxRequestIdBytes, 'x'));
}

TEST(RequestId, GeneratedIdsAreUnique) {
  RequestIds ids;
  grpc::ServerContext context;  // no client metadata
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = ids.Next(context);
    EXPECT_THAT(id, MatchesRegex("[0-9a-f]{8}-[0-9]+"));
    EXPECT_TRUE(seen.insert(id).second) << id;
  }
}

v1::Tensor Tensor(v1::DType dtype, std::initializer_list<int64_t> shape) {
  v1::Tensor t;
  t.set_dtype(dtype);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_data(std::string(n * (dtype == v1::FP32 ? 4 : 2), '\x5a'));
  return t;
}

TEST(DescribeTensors, DtypesAndShapesNeverData) {
  v1::ForwardRequest forward;
  *forward.mutable_x() = Tensor(v1::BF16, {2, 64, 128});
  *forward.mutable_inline_weights()->mutable_weight() = Tensor(v1::FP32, {64, 4});
  *forward.mutable_inline_weights()->mutable_bias() = Tensor(v1::FP32, {64});
  const std::string described = DescribeTensors(forward);
  EXPECT_EQ(described, "x=bf16[2,64,128] weight=fp32[64,4] bias=fp32[64]");
  EXPECT_THAT(described, Not(HasSubstr("ZZ")));  // the data bytes

  v1::ForwardRequest named;
  *named.mutable_x() = Tensor(v1::FP16, {1, 8, 3});
  named.set_weights_name("my \"weights\"\n");
  EXPECT_EQ(DescribeTensors(named), "x=fp16[1,8,3] weights_name=\"my \\\"weights\\\"\\n\"");

  v1::UpdateRequest odd;
  odd.mutable_x()->set_dtype(static_cast<v1::DType>(9));
  for (int i = 0; i < 10; ++i) odd.mutable_x()->add_shape(1);
  EXPECT_EQ(DescribeTensors(odd), "x=dtype(9)[1,1,1,1,1,1,1,1,...]");

  EXPECT_EQ(DescribeTensors(v1::ServerInfoRequest()), "");
}

}  // namespace
}  // namespace conv1d
