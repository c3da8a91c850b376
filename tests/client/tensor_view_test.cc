// TensorView: views borrow the caller's bytes (no copy) in every dtype,
// reject byte counts that do not match their shape, read wire tensors in
// place, convert to and from HostTensor; and the typed-call builders
// (call_args.h) put each view and switch where the wire expects it.
#include <cstdint>
#include <cstring>
#include <vector>

#include "client/call_args.h"
#include "client/host_tensor.h"
#include "client/tensor_view.h"
#include "gtest/gtest.h"

namespace conv1d {
namespace {

using client::TensorView;

TEST(TensorView, Fp32ViewBorrowsTheCallersArray) {
  const std::vector<float> x = {1.f, -2.5f, 3.25f, 0.f, 7.f, -1e-3f};
  const TensorView v(x.data(), {1, 2, 3});
  EXPECT_EQ(v.dtype(), DType::kF32);
  EXPECT_EQ(std::vector<int64_t>(v.shape().begin(), v.shape().end()),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(v.num_elements(), 6);
  EXPECT_EQ(v.num_bytes(), 24);
  EXPECT_EQ(static_cast<const void*>(v.bytes().data()), static_cast<const void*>(x.data()));
  EXPECT_FALSE(v.empty());
  EXPECT_EQ(v.ToFloats(), x);
  EXPECT_EQ(v.DebugString(), "fp32[1,2,3]");
}

TEST(TensorView, SixteenBitViewsCarryRawBits) {
  // bf16 1.0 = 0x3f80, -2.0 = 0xc000; fp16 1.0 = 0x3c00, 0.5 = 0x3800.
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000};
  const std::vector<uint16_t> fp16 = {0x3c00, 0x3800};
  const TensorView b(bf16.data(), {2}, DType::kBF16);
  const TensorView h(fp16.data(), {1, 2}, DType::kF16);
  EXPECT_EQ(b.num_bytes(), 4);
  EXPECT_EQ(b.ToFloats(), (std::vector<float>{1.f, -2.f}));
  EXPECT_EQ(h.ToFloats(), (std::vector<float>{1.f, 0.5f}));
  const v1::Tensor t = b.ToProto();
  EXPECT_EQ(t.dtype(), v1::BF16);
  ASSERT_EQ(t.data().size(), 4u);
  EXPECT_EQ(std::memcmp(t.data().data(), bf16.data(), 4), 0);
}

TEST(TensorView, FromBytesChecksSizeAndShape) {
  const std::vector<uint8_t> bytes(12);
  EXPECT_TRUE(TensorView::FromBytes(DType::kF32, {3}, bytes).ok());
  EXPECT_TRUE(TensorView::FromBytes(DType::kF16, {2, 3}, bytes).ok());
  absl::StatusOr<TensorView> wrong = TensorView::FromBytes(DType::kF32, {4}, bytes);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("fp32[4] takes 16 bytes, got 12"),
            std::string::npos)
      << wrong.status();
  EXPECT_EQ(TensorView::FromBytes(DType::kF32, {-1, -3}, bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorView, ReadsWireTensorsInPlace) {
  const HostTensor h = HostTensor::Random(DType::kBF16, {2, 3, 5}, 7);
  const v1::Tensor t = h.ToProto();
  absl::StatusOr<TensorView> v = TensorView::FromProto(t);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(static_cast<const void*>(v->bytes().data()),
            static_cast<const void*>(t.data().data()));
  EXPECT_EQ(v->DebugString(), "bf16[2,3,5]");
  EXPECT_EQ(v->ToFloats(), h.ToFloats());

  EXPECT_TRUE(TensorView::FromProto(v1::Tensor())->empty());  // absent tensor
  v1::Tensor bad = t;
  bad.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_FALSE(TensorView::FromProto(bad).ok());
  bad = t;
  bad.mutable_data()->pop_back();
  EXPECT_FALSE(TensorView::FromProto(bad).ok());
}

TEST(TensorView, HostTensorRoundTrip) {
  const HostTensor h = HostTensor::Random(DType::kF16, {4, 6}, 3);
  const TensorView v = h.view();
  EXPECT_EQ(static_cast<const void*>(v.bytes().data()),
            static_cast<const void*>(h.data.data()));
  const HostTensor copy = HostTensor::FromView(v);
  EXPECT_EQ(copy.dtype, h.dtype);
  EXPECT_EQ(copy.shape, h.shape);
  EXPECT_EQ(copy.data, h.data);
  const HostTensor none;
  EXPECT_TRUE(none.view().empty());
}

TEST(CallArgs, BuildersPlaceEveryViewAndSwitch) {
  const std::vector<float> x(2 * 4 * 5, 1.f), w(4 * 3, 0.5f), b(4, 0.25f), s(2 * 4 * 2, 2.f);
  ForwardArgs f;
  f.x = TensorView(x.data(), {2, 4, 5});
  f.weights.weight = TensorView(w.data(), {4, 3});
  f.weights.bias = TensorView(b.data(), {4});
  f.initial_states = TensorView(s.data(), {2, 4, 2});
  f.silu = true;
  f.channel_last = true;
  f.return_final_states = true;
  const v1::ForwardRequest fr = MakeForwardRequest(f);
  EXPECT_EQ(fr.x().data().size(), x.size() * 4);
  EXPECT_EQ(fr.inline_weights().weight().shape_size(), 2);
  EXPECT_EQ(fr.inline_weights().bias().shape(0), 4);
  EXPECT_EQ(fr.initial_states().shape(2), 2);
  EXPECT_EQ(fr.activation(), v1::ACTIVATION_SILU);
  EXPECT_EQ(fr.layout(), v1::LAYOUT_CHANNEL_LAST);
  EXPECT_TRUE(fr.return_final_states());

  // Registered weights by name; absent optional tensors stay absent.
  ForwardArgs named;
  named.x = f.x;
  named.weights.name = "layer0";
  named.weights.weight = f.weights.weight;  // ignored: the name wins
  const v1::ForwardRequest nr = MakeForwardRequest(named);
  EXPECT_EQ(nr.weights_name(), "layer0");
  EXPECT_FALSE(nr.has_inline_weights());
  EXPECT_FALSE(nr.has_initial_states());
  EXPECT_EQ(nr.activation(), v1::ACTIVATION_NONE);

  BackwardArgs bw;
  bw.x = f.x;
  bw.dout = f.x;
  bw.weights = f.weights;
  bw.dfinal_states = f.initial_states;
  bw.return_dinitial_states = true;
  bw.grad_weight_fp32 = true;
  const v1::BackwardRequest br = MakeBackwardRequest(bw);
  EXPECT_EQ(br.dout().data(), br.x().data());
  EXPECT_TRUE(br.has_dfinal_states());
  EXPECT_FALSE(br.has_initial_states());
  EXPECT_TRUE(br.return_dinitial_states());
  EXPECT_TRUE(br.grad_weight_fp32());

  UpdateArgs up;
  up.x = TensorView(x.data(), {2, 4, 1});
  up.conv_state = TensorView(s.data(), {2, 4, 2});
  up.weights.name = "layer0";
  const v1::UpdateRequest ur = MakeUpdateRequest(up);
  EXPECT_EQ(ur.conv_state().shape(2), 2);
  EXPECT_EQ(ur.weights_name(), "layer0");

  const v1::RegisterWeightsRequest rr =
      MakeRegisterWeightsRequest("layer0", f.weights.weight, {}, /*replace=*/true);
  EXPECT_EQ(rr.name(), "layer0");
  EXPECT_EQ(rr.weight().data().size(), w.size() * 4);
  EXPECT_FALSE(rr.has_bias());
  EXPECT_TRUE(rr.replace());
}

}  // namespace
}  // namespace conv1d
