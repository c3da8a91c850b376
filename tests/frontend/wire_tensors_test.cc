// Tensor bytes kept outside protobuf strings (server/frontend/wire_tensors.h):
// ParseWithDetachedData over multi-slice buffers, its fallbacks for unusual
// encodings and its errors; SerializeWithDetachedData's zero-copy slices and
// their lifetime; validation and binding with detached tensors. Unit tests:
// no server (the server's side is tests/e2e/wire_tensors_e2e_test.cc).
#include "server/frontend/wire_tensors.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "server/frontend/validation.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/frontend/wire_bytes.h"

namespace conv1d::e2e {
namespace {

using ::google::protobuf::io::CodedOutputStream;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kBig = 100000;  // x and dout bytes: 2*50*250*4

std::string RandomBytes(size_t n, Rng* rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>((*rng)() & 0xff);
  return s;
}

// `bytes` as a ByteBuffer whose slices end at each of `cuts` (copies).
grpc::ByteBuffer Chunked(const std::string& bytes, std::vector<size_t> cuts = {}) {
  cuts.push_back(bytes.size());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t c : cuts) {
    if (c <= at || c > bytes.size()) continue;
    slices.emplace_back(bytes.data() + at, c - at);
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Heap buffers, recording every size asked for.
struct RecordingAllocator {
  std::vector<int64_t> requests;
  HostAllocator Get() {
    return [this](int64_t bytes) {
      requests.push_back(bytes);
      return std::shared_ptr<void>(::operator new(static_cast<size_t>(bytes)),
                                   [](void* p) { ::operator delete(p); });
    };
  }
};

// Field-by-field equality, naming the differences when there are any.
::testing::AssertionResult SameMessage(const google::protobuf::Message& want,
                                       const google::protobuf::Message& got) {
  std::string diff;
  MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  if (d.Compare(want, got)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

std::string EntryBytes(const DetachedTensors::Entry& e) {
  return std::string(static_cast<const char*>(e.buffer.get()), static_cast<size_t>(e.bytes));
}

v1::Tensor WireTensor(v1::DType dtype, std::vector<int64_t> shape, std::string data) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  *t.mutable_data() = std::move(data);
  return t;
}

// A backward request with two 100 KB activations, small states, inline
// weights and every scalar set (non-default).
v1::BackwardRequest LargeBackward(Rng* rng) {
  v1::BackwardRequest r;
  *r.mutable_x() = WireTensor(v1::FP32, {2, 250, 50}, RandomBytes(kBig, rng));
  *r.mutable_dout() = WireTensor(v1::FP32, {2, 250, 50}, RandomBytes(kBig, rng));
  r.set_layout(v1::LAYOUT_CHANNEL_LAST);
  r.set_activation(v1::ACTIVATION_SILU);
  *r.mutable_inline_weights()->mutable_weight() =
      WireTensor(v1::FP32, {50, 4}, RandomBytes(800, rng));
  *r.mutable_inline_weights()->mutable_bias() =
      WireTensor(v1::FP32, {50}, RandomBytes(200, rng));
  *r.mutable_initial_states() = WireTensor(v1::FP32, {2, 50, 3}, RandomBytes(1200, rng));
  *r.mutable_dfinal_states() = WireTensor(v1::FP32, {2, 50, 3}, RandomBytes(1200, rng));
  r.set_return_dinitial_states(true);
  r.set_grad_weight_fp32(true);
  return r;
}

// Offsets into r.SerializeAsString() that split tags, varints and data.
std::vector<size_t> AwkwardCuts(const v1::BackwardRequest& r) {
  const size_t x_head = 1 + CodedOutputStream::VarintSize64(r.x().ByteSizeLong());
  v1::Tensor x_shell = r.x();
  x_shell.clear_data();
  const size_t x_data_tag = x_head + x_shell.ByteSizeLong();
  const size_t x_end = x_head + r.x().ByteSizeLong();
  v1::Tensor dout_shell = r.dout();
  dout_shell.clear_data();
  const size_t dout_head = 1 + CodedOutputStream::VarintSize64(r.dout().ByteSizeLong());
  const size_t dout_data_tag = x_end + dout_head + dout_shell.ByteSizeLong();
  return {
      7,                       // inside x's shape
      x_data_tag + 2,          // in the middle of x.data's length varint
      x_data_tag + 4 + 12345,  // in the middle of x.data
      x_data_tag + 4 + 12346,  // a one-byte slice
      x_end + 1,               // in the middle of dout's tag and length
      dout_data_tag + 1,       // just after dout.data's tag
      dout_data_tag + 3 + 99,  // in the middle of dout.data
      r.ByteSizeLong() - 3,    // near the end
  };
}

// ---------------------------------------------------------------------------
// ParseWithDetachedData

TEST(WireTensorsParse, LargeTopLevelTensorsAreDetachedAcrossSliceBoundaries) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 11);
  Rng rng(test_seed);
  const v1::BackwardRequest original = LargeBackward(&rng);
  const std::string bytes = original.SerializeAsString();
  const grpc::ByteBuffer buffer = Chunked(bytes, AwkwardCuts(original));
  ASSERT_EQ(buffer.Length(), bytes.size());

  RecordingAllocator alloc;
  v1::BackwardRequest parsed;
  DetachedTensors detached;
  ASSERT_TRUE(
      ParseWithDetachedData(buffer, &parsed, kDefaultMin, alloc.Get(), &detached).ok());
  EXPECT_EQ(detached.size(), 2);
  EXPECT_THAT(alloc.requests, ElementsAre(int64_t{kBig}, int64_t{kBig}));
  EXPECT_TRUE(parsed.x().data().empty());
  EXPECT_TRUE(parsed.dout().data().empty());
  const DetachedTensors::Entry* x = detached.Find(&parsed.x());
  const DetachedTensors::Entry* dout = detached.Find(&parsed.dout());
  ASSERT_NE(x, nullptr);
  ASSERT_NE(dout, nullptr);
  EXPECT_EQ(x->tensor, &parsed.x());
  EXPECT_EQ(x->bytes, static_cast<int64_t>(kBig));
  EXPECT_EQ(dout->bytes, static_cast<int64_t>(kBig));
  EXPECT_EQ(std::memcmp(x->buffer.get(), original.x().data().data(), kBig), 0);
  EXPECT_EQ(std::memcmp(dout->buffer.get(), original.dout().data().data(), kBig), 0);
  // Small and nested tensors keep their bytes.
  EXPECT_EQ(detached.Find(&parsed.initial_states()), nullptr);
  EXPECT_EQ(detached.Find(&parsed.dfinal_states()), nullptr);
  EXPECT_EQ(detached.Find(&parsed.inline_weights().weight()), nullptr);
  EXPECT_EQ(parsed.initial_states().data(), original.initial_states().data());
  EXPECT_EQ(parsed.dfinal_states().data(), original.dfinal_states().data());
  EXPECT_EQ(parsed.inline_weights().weight().data(),
            original.inline_weights().weight().data());
  EXPECT_EQ(parsed.inline_weights().bias().data(), original.inline_weights().bias().data());
  // Everything else is as sent.
  EXPECT_THAT(parsed.x().shape(), ElementsAre(2, 250, 50));
  EXPECT_EQ(parsed.x().dtype(), v1::FP32);
  v1::BackwardRequest restored = parsed;
  restored.mutable_x()->set_data(EntryBytes(*x));
  restored.mutable_dout()->set_data(EntryBytes(*dout));
  EXPECT_TRUE(SameMessage(original, restored));
}

TEST(WireTensorsParse, ThresholdIsInclusiveAndNegativeDetachesNothing) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 12);
  Rng rng(test_seed);
  const v1::BackwardRequest original = LargeBackward(&rng);
  const std::string bytes = original.SerializeAsString();
  for (int64_t min_bytes : {int64_t{-1}, static_cast<int64_t>(kBig) + 1,
                            static_cast<int64_t>(kBig)}) {
    SCOPED_TRACE(min_bytes);
    RecordingAllocator alloc;
    v1::BackwardRequest parsed;
    DetachedTensors detached;
    ASSERT_TRUE(ParseWithDetachedData(Chunked(bytes, AwkwardCuts(original)), &parsed,
                                      min_bytes, alloc.Get(), &detached)
                    .ok());
    if (min_bytes == static_cast<int64_t>(kBig)) {
      EXPECT_EQ(detached.size(), 2);  // exactly min_bytes: detached
      EXPECT_NE(detached.Find(&parsed.x()), nullptr);
      EXPECT_NE(detached.Find(&parsed.dout()), nullptr);
    } else {
      EXPECT_TRUE(detached.empty());
      EXPECT_TRUE(alloc.requests.empty());
      EXPECT_TRUE(SameMessage(original, parsed));
    }
  }
}

TEST(WireTensorsParse, ZeroThresholdDetachesEveryNonEmptyTopLevelTensor) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 13);
  Rng rng(test_seed);
  v1::BackwardRequest original = LargeBackward(&rng);
  original.mutable_dfinal_states()->clear_data();  // an empty one stays inline
  original.mutable_dfinal_states()->set_shape(2, 0);
  const std::string bytes = original.SerializeAsString();
  RecordingAllocator alloc;
  v1::BackwardRequest parsed;
  DetachedTensors detached;
  ASSERT_TRUE(ParseWithDetachedData(Chunked(bytes, {1, 2, 3, 1000, 150000}), &parsed, 0,
                                    alloc.Get(), &detached)
                  .ok());
  EXPECT_EQ(detached.size(), 3);
  EXPECT_THAT(alloc.requests, ElementsAre(int64_t{kBig}, int64_t{kBig}, int64_t{1200}));
  for (const v1::Tensor* t : {&parsed.x(), &parsed.dout(), &parsed.initial_states()}) {
    const DetachedTensors::Entry* e = detached.Find(t);
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(t->data().empty());
  }
  EXPECT_EQ(EntryBytes(*detached.Find(&parsed.initial_states())),
            original.initial_states().data());
  EXPECT_EQ(detached.Find(&parsed.dfinal_states()), nullptr);
  EXPECT_TRUE(parsed.has_dfinal_states());
  EXPECT_THAT(parsed.dfinal_states().shape(), ElementsAre(2, 50, 0));
  // Nested tensors are never detached.
  EXPECT_EQ(detached.Find(&parsed.inline_weights().weight()), nullptr);
  EXPECT_EQ(detached.Find(&parsed.inline_weights().bias()), nullptr);
  v1::BackwardRequest restored = parsed;
  restored.mutable_x()->set_data(EntryBytes(*detached.Find(&parsed.x())));
  restored.mutable_dout()->set_data(EntryBytes(*detached.Find(&parsed.dout())));
  restored.mutable_initial_states()->set_data(
      EntryBytes(*detached.Find(&parsed.initial_states())));
  EXPECT_TRUE(SameMessage(original, restored));
}

TEST(WireTensorsParse, ExplicitEmptyDataAndUnknownFieldsParseLikeProtobuf) {
  // x with an explicit zero-length data field, then an unknown varint field
  // and an unknown length-delimited field at the top level.
  const std::string x = std::string("\x08\x01\x12\x01\x01\x1a\x00", 7);
  const std::string bytes = Delimited(1, x) + std::string("\xa8\x06\x07", 3) +  // 101: 7
                            Delimited(102, "hello") + Delimited(2, x);
  v1::BackwardRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  RecordingAllocator alloc;
  v1::BackwardRequest parsed;
  DetachedTensors detached;
  ASSERT_TRUE(
      ParseWithDetachedData(Chunked(bytes, {4, 9}), &parsed, 0, alloc.Get(), &detached).ok());
  EXPECT_TRUE(detached.empty());
  EXPECT_TRUE(alloc.requests.empty());
  EXPECT_TRUE(SameMessage(expected, parsed));
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());  // unknowns kept
}

TEST(WireTensorsParse, TensorFieldSentTwiceFallsBackToTheOrdinaryMerge) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 14);
  Rng rng(test_seed);
  const v1::BackwardRequest full = LargeBackward(&rng);
  // First x's dtype and shape (and layout), then a second x with the data
  // and the rest of the message: protobuf merges the two x's.
  v1::BackwardRequest first;
  first.mutable_x()->set_dtype(v1::FP32);
  first.mutable_x()->mutable_shape()->CopyFrom(full.x().shape());
  first.set_layout(v1::LAYOUT_CHANNEL_LAST);
  v1::BackwardRequest second = full;
  second.mutable_x()->clear_dtype();
  second.mutable_x()->clear_shape();
  const std::string bytes = first.SerializeAsString() + second.SerializeAsString();
  v1::BackwardRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_TRUE(SameMessage(expected, full));  // independent check

  for (int64_t min_bytes : {int64_t{0}, kDefaultMin}) {
    SCOPED_TRACE(min_bytes);
    RecordingAllocator alloc;
    v1::BackwardRequest parsed;
    DetachedTensors detached;
    ASSERT_TRUE(ParseWithDetachedData(Chunked(bytes, {5, first.ByteSizeLong() + 3}),
                                      &parsed, min_bytes, alloc.Get(), &detached)
                    .ok());
    EXPECT_EQ(detached.Find(&parsed.x()), nullptr);
    EXPECT_TRUE(detached.empty());
    EXPECT_EQ(parsed.x().data(), full.x().data());
    EXPECT_TRUE(SameMessage(expected, parsed));
  }
}

TEST(WireTensorsParse, LargeTensorSentTwiceKeepsTheLaterData) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 15);
  Rng rng(test_seed);
  v1::BackwardRequest a = LargeBackward(&rng);
  v1::BackwardRequest b;
  *b.mutable_dout() = WireTensor(v1::FP32, {2, 250, 50}, RandomBytes(kBig, &rng));
  const std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  v1::BackwardRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_EQ(expected.dout().data(), b.dout().data());
  RecordingAllocator alloc;
  v1::BackwardRequest parsed;
  DetachedTensors detached;
  ASSERT_TRUE(
      ParseWithDetachedData(Chunked(bytes), &parsed, 0, alloc.Get(), &detached).ok());
  EXPECT_TRUE(detached.empty());
  EXPECT_EQ(parsed.dout().data(), b.dout().data());
  EXPECT_TRUE(SameMessage(expected, parsed));
}

TEST(WireTensorsParse, DataRepeatedInsideOneTensorFallsBackLastOneWins) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 16);
  Rng rng(test_seed);
  const std::string first = RandomBytes(70000, &rng);
  const std::string second = RandomBytes(70000, &rng);
  v1::Tensor shell = WireTensor(v1::FP32, {1, 1, 17500}, "");
  const std::string x = shell.SerializeAsString() + Delimited(3, first) + Delimited(3, second);
  v1::BackwardRequest rest;
  *rest.mutable_dout() = WireTensor(v1::FP32, {1, 1, 17500}, RandomBytes(70000, &rng));
  rest.set_grad_weight_fp32(true);
  const std::string bytes = Delimited(1, x) + rest.SerializeAsString();
  v1::BackwardRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_EQ(expected.x().data(), second);

  for (int64_t min_bytes : {int64_t{0}, kDefaultMin}) {
    SCOPED_TRACE(min_bytes);
    RecordingAllocator alloc;
    v1::BackwardRequest parsed;
    DetachedTensors detached;
    ASSERT_TRUE(ParseWithDetachedData(Chunked(bytes, {3, 70010}), &parsed, min_bytes,
                                      alloc.Get(), &detached)
                    .ok());
    EXPECT_TRUE(detached.empty());
    EXPECT_EQ(parsed.x().data(), second);
    EXPECT_EQ(parsed.dout().data(), rest.dout().data());
    EXPECT_TRUE(SameMessage(expected, parsed));
  }
}

TEST(WireTensorsParse, MalformedBytesAreInvalidArgumentNamingTheType) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 17);
  Rng rng(test_seed);
  const v1::BackwardRequest original = LargeBackward(&rng);
  const std::string bytes = original.SerializeAsString();
  const std::vector<size_t> cuts = AwkwardCuts(original);
  // Cut in the middle of x's data, of dout's data, and a garbage tag.
  const std::vector<std::string> inputs = {
      bytes.substr(0, cuts[2]),
      bytes.substr(0, cuts[6]),
      std::string("\x0a\x05\x08\x01\xff\xff\xff", 7),
      std::string("\x07", 1),  // wire type 7
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_FALSE(v1::BackwardRequest().ParseFromString(inputs[i])) << i;
    for (int64_t min_bytes : {int64_t{-1}, int64_t{0}, kDefaultMin}) {
      SCOPED_TRACE(::testing::Message() << "input " << i << " min_bytes " << min_bytes);
      RecordingAllocator alloc;
      v1::BackwardRequest parsed;
      DetachedTensors detached;
      const absl::Status s = ParseWithDetachedData(Chunked(inputs[i], {7, 15, 13000}),
                                                   &parsed, min_bytes, alloc.Get(), &detached);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("conv1d.v1.BackwardRequest"));
      EXPECT_TRUE(detached.empty());
    }
  }
}

// A top-level tensor whose declared length runs past the end of the message,
// cut at a field boundary inside it (here: before x.data's tag). protobuf
// rejects it; so must ParseWithDetachedData ("the result always equals what
// ParseFromZeroCopyStream gives").
TEST(WireTensorsParse, TensorTruncatedAtAFieldBoundaryIsInvalid) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 18);
  Rng rng(test_seed);
  const v1::BackwardRequest original = LargeBackward(&rng);
  const std::string bytes = original.SerializeAsString();
  const size_t x_head = 1 + CodedOutputStream::VarintSize64(original.x().ByteSizeLong());
  v1::Tensor x_shell = original.x();
  x_shell.clear_data();
  const std::string cut = bytes.substr(0, x_head + x_shell.ByteSizeLong());
  ASSERT_FALSE(v1::BackwardRequest().ParseFromString(cut));
  for (int64_t min_bytes : {int64_t{-1}, int64_t{0}, kDefaultMin}) {
    SCOPED_TRACE(min_bytes);
    RecordingAllocator alloc;
    v1::BackwardRequest parsed;
    DetachedTensors detached;
    const absl::Status s =
        ParseWithDetachedData(Chunked(cut), &parsed, min_bytes, alloc.Get(), &detached);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << s << " parsed: " << parsed.ShortDebugString();
  }
}

// x.data declares 1 GiB but the message has a few bytes: it does not parse,
// and nothing sized by the declared length should be allocated.
TEST(WireTensorsParse, DeclaredDataLengthBeyondTheMessageAllocatesNothingLarge) {
  const std::string x = std::string("\x08\x01\x1a", 3) + Varint(uint64_t{1} << 30) +
                        std::string(10, 'z');
  const std::string bytes = Delimited(1, x);
  ASSERT_FALSE(v1::BackwardRequest().ParseFromString(bytes));
  RecordingAllocator alloc;
  v1::BackwardRequest parsed;
  DetachedTensors detached;
  const absl::Status s =
      ParseWithDetachedData(Chunked(bytes), &parsed, kDefaultMin, alloc.Get(), &detached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (int64_t r : alloc.requests) {
    EXPECT_LE(r, static_cast<int64_t>(bytes.size())) << "allocated for a declared length";
  }
}

// x.data declares 2^31 bytes (does not fit an int): must be INVALID_ARGUMENT,
// not a crash. Run in a child process so that a crash fails only this test.
TEST(WireTensorsParseDeathTest, DeclaredDataLengthOf2To31DoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string x = std::string("\x08\x01\x1a", 3) + Varint(uint64_t{1} << 31) +
                        std::string(10, 'z');
  const std::string bytes = Delimited(1, x);
  ASSERT_FALSE(v1::BackwardRequest().ParseFromString(bytes));
  EXPECT_EXIT(
      {
        // Heap memory of the size asked for, as HeapHostBuffers.
        RecordingAllocator alloc;
        v1::BackwardRequest parsed;
        DetachedTensors detached;
        const absl::Status s = ParseWithDetachedData(Chunked(bytes), &parsed, kDefaultMin,
                                                     alloc.Get(), &detached);
        std::exit(s.code() == absl::StatusCode::kInvalidArgument ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// A forward request whose x has its top-level tag, its length, its data tag
// and its data length encoded in the given numbers of bytes, then inline
// weights sent the ordinary way.
std::string ForwardWithPaddedX(int x_tag_bytes, int x_length_bytes, int data_tag_bytes,
                               int data_length_bytes, const std::string& data) {
  std::string shape = Varint(1) + Varint(8) + Varint(data.size() / 32);
  std::string x = "\x08\x01" + Delimited(2, shape) + PaddedVarint(0x1a, data_tag_bytes) +
                  PaddedVarint(data.size(), data_length_bytes) + data;
  v1::ForwardRequest rest;
  *rest.mutable_inline_weights()->mutable_weight() =
      WireTensor(v1::FP32, {8, 4}, std::string(128, '\x02'));
  return PaddedVarint(0x0a, x_tag_bytes) + PaddedVarint(x.size(), x_length_bytes) + x +
         rest.SerializeAsString();
}

// What ParseWithDetachedData made, with the detached data put back.
const v1::ForwardRequest& Reattached(v1::ForwardRequest* m, const DetachedTensors& detached) {
  if (const DetachedTensors::Entry* e = detached.Find(&m->x()); e != nullptr) {
    m->mutable_x()->set_data(EntryBytes(*e));
  }
  return *m;
}

// Protobuf's parser takes tags and lengths of at most 5 bytes (a length's
// fifth below 8); CodedInputStream::ReadTag takes up to 10. The split parser
// must side with the parser: same verdict, same fields, for every encoding.
TEST(WireTensorsParse, OverLongVarintsAreRefusedExactlyWhenProtobufRefusesThem) {
  Rng rng(17);
  const std::string data = RandomBytes(8192, &rng);
  struct Variant {
    const char* what;
    int x_tag, x_length, data_tag, data_length;
  };
  std::vector<Variant> variants;
  for (int n = 1; n <= 11; ++n) {
    variants.push_back({"x tag", n, 2, 1, 2});
    variants.push_back({"x length", 1, std::max(n, 2), 1, 2});
    variants.push_back({"data tag", 1, 2, n, 2});
    variants.push_back({"data length", 1, 2, 1, std::max(n, 2)});
  }
  int accepted = 0, refused = 0;
  for (const Variant& v : variants) {
    const int bytes_used = std::string(v.what) == "x tag"      ? v.x_tag
                           : std::string(v.what) == "x length" ? v.x_length
                           : std::string(v.what) == "data tag" ? v.data_tag
                                                               : v.data_length;
    SCOPED_TRACE(::testing::Message() << v.what << " in " << bytes_used << " bytes");
    const std::string bytes =
        ForwardWithPaddedX(v.x_tag, v.x_length, v.data_tag, v.data_length, data);
    v1::ForwardRequest want;
    const bool protobuf_ok = want.ParseFromString(bytes);
    EXPECT_EQ(protobuf_ok, bytes_used <= 5);
    (protobuf_ok ? accepted : refused)++;
    for (int64_t min_bytes : {int64_t{-1}, int64_t{0}, kDefaultMin}) {
      SCOPED_TRACE(min_bytes);
      RecordingAllocator alloc;
      v1::ForwardRequest got;
      DetachedTensors detached;
      const absl::Status s = ParseWithDetachedData(Chunked(bytes, {3, 11, 40}), &got,
                                                   min_bytes, alloc.Get(), &detached);
      ASSERT_EQ(s.ok(), protobuf_ok) << s;
      if (!protobuf_ok) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      EXPECT_TRUE(SameMessage(want, Reattached(&got, detached)));
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

// ---------------------------------------------------------------------------
// SerializeWithDetachedData

TEST(WireTensorsSerialize, DetachedDataIsSentZeroCopyAndKeptAliveByTheBuffer) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 21);
  Rng rng(test_seed);
  const size_t n = 2 * 64 * 300 * 2;  // bf16 [2, 64, 300]
  const std::string y_bytes = RandomBytes(n, &rng);
  v1::ForwardResponse response;
  *response.mutable_y() = WireTensor(v1::BF16, {2, 64, 300}, "");
  *response.mutable_final_states() = WireTensor(v1::BF16, {2, 64, 3}, RandomBytes(768, &rng));
  v1::ForwardResponse expected = response;
  expected.mutable_y()->set_data(y_bytes);

  bool freed = false;
  const void* raw = nullptr;
  grpc::ByteBuffer buffer;
  {
    HostAllocator allocate = [&freed](int64_t bytes) {
      return std::shared_ptr<void>(new char[static_cast<size_t>(bytes)], [&freed](void* p) {
        delete[] static_cast<char*>(p);
        freed = true;
      });
    };
    std::shared_ptr<void> y = allocate(static_cast<int64_t>(n)).data;
    std::memcpy(y.get(), y_bytes.data(), n);
    raw = y.get();
    auto detached = std::make_unique<DetachedTensors>();
    detached->Add(&response.y(), std::move(y), static_cast<int64_t>(n));
    ASSERT_TRUE(SerializeWithDetachedData(response, *detached, &buffer).ok());
    detached.reset();
  }
  EXPECT_FALSE(freed) << "the ByteBuffer must keep the detached buffer alive";
  EXPECT_EQ(buffer.Length(), expected.ByteSizeLong());
  {
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    EXPECT_GE(slices.size(), 2u);
    bool zero_copy = false;
    for (const grpc::Slice& s : slices) {
      zero_copy |= s.begin() == raw && s.size() == n;
    }
    EXPECT_TRUE(zero_copy) << "no slice points at the detached buffer";
    v1::ForwardResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
    EXPECT_EQ(parsed.y().data(), y_bytes);
    EXPECT_EQ(parsed.y().dtype(), v1::BF16);
    EXPECT_THAT(parsed.y().shape(), ElementsAre(2, 64, 300));
    EXPECT_EQ(parsed.final_states().data(), response.final_states().data());
    EXPECT_TRUE(SameMessage(expected, parsed));
  }
  EXPECT_FALSE(freed);
  // gRPC copies ByteBuffers by reference: a copy keeps the data alive too.
  grpc::ByteBuffer copy(buffer);
  buffer.Clear();
  EXPECT_FALSE(freed);
  EXPECT_EQ(Flatten(copy).size(), expected.ByteSizeLong());
  copy.Clear();
  EXPECT_TRUE(freed) << "the detached buffer outlived every ByteBuffer";
}

TEST(WireTensorsSerialize, SeveralDetachedTensorsAroundInlineOnes) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 22);
  Rng rng(test_seed);
  v1::BackwardResponse response;
  *response.mutable_dx() = WireTensor(v1::FP32, {2, 64, 300}, "");
  *response.mutable_dweight() = WireTensor(v1::FP32, {64, 4}, RandomBytes(1024, &rng));
  *response.mutable_dbias() = WireTensor(v1::FP32, {64}, "");
  *response.mutable_dinitial_states() = WireTensor(v1::FP32, {2, 64, 3}, RandomBytes(1536, &rng));
  const std::string dx = RandomBytes(153600, &rng), dbias = RandomBytes(256, &rng);
  DetachedTensors detached;
  for (auto [t, bytes] : {std::pair<const v1::Tensor*, const std::string*>{&response.dx(), &dx},
                          {&response.dbias(), &dbias}}) {
    std::shared_ptr<void> b(::operator new(bytes->size()), [](void* p) { ::operator delete(p); });
    std::memcpy(b.get(), bytes->data(), bytes->size());
    detached.Add(t, std::move(b), static_cast<int64_t>(bytes->size()));
  }
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeWithDetachedData(response, detached, &buffer).ok());
  v1::BackwardResponse expected = response;
  expected.mutable_dx()->set_data(dx);
  expected.mutable_dbias()->set_data(dbias);
  const std::string flat = Flatten(buffer);
  EXPECT_EQ(flat.size(), expected.ByteSizeLong());
  v1::BackwardResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(flat));
  EXPECT_TRUE(SameMessage(expected, parsed));
}

TEST(WireTensorsSerialize, NoDetachedEntriesSerializesLikeSerializeToString) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 23);
  Rng rng(test_seed);
  v1::ForwardResponse response;
  *response.mutable_y() = WireTensor(v1::FP32, {2, 64, 300}, RandomBytes(153600, &rng));
  *response.mutable_final_states() = WireTensor(v1::FP32, {2, 64, 3}, RandomBytes(1536, &rng));
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeWithDetachedData(response, DetachedTensors(), &buffer).ok());
  EXPECT_EQ(Flatten(buffer), response.SerializeAsString());

  // Entries for tensors of another message are ignored.
  v1::ForwardResponse other;
  other.mutable_y();
  DetachedTensors unrelated;
  unrelated.Add(&other.y(), std::shared_ptr<void>(::operator new(8), [](void* p) {
                  ::operator delete(p);
                }), 8);
  grpc::ByteBuffer buffer2;
  ASSERT_TRUE(SerializeWithDetachedData(response, unrelated, &buffer2).ok());
  EXPECT_EQ(Flatten(buffer2), response.SerializeAsString());

  // An empty message still gives a valid (empty) buffer.
  grpc::ByteBuffer empty;
  ASSERT_TRUE(SerializeWithDetachedData(v1::ForwardResponse(), DetachedTensors(), &empty).ok());
  EXPECT_EQ(Flatten(empty), "");
}

TEST(WireTensorsSerialize, DataBothInlineAndDetachedIsInternal) {
  v1::ForwardResponse response;
  *response.mutable_y() = WireTensor(v1::FP32, {1, 1, 2}, std::string(8, 'a'));
  DetachedTensors detached;
  detached.Add(&response.y(), std::shared_ptr<void>(::operator new(8), [](void* p) {
                 ::operator delete(p);
               }), 8);
  grpc::ByteBuffer buffer;
  const absl::Status s = SerializeWithDetachedData(response, detached, &buffer);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("y"));
}

// ---------------------------------------------------------------------------
// Validation and binding with detached tensors

TEST(WireTensorsValidation, DetachedInputsAreViewedInTheirBuffers) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 31);
  Rng rng(test_seed);
  const Case c = LargeForwardCase(DType::kF32);
  const Inputs in = MakeInputs(c, &rng);
  const std::string bytes = MakeForward(c, in).SerializeAsString();
  RecordingAllocator alloc;
  v1::ForwardRequest request;
  DetachedTensors detached;
  ASSERT_TRUE(
      ParseWithDetachedData(Chunked(bytes, {3, 77}), &request, kDefaultMin, alloc.Get(), &detached)
          .ok());
  const DetachedTensors::Entry* x = detached.Find(&request.x());
  ASSERT_NE(x, nullptr);
  ASSERT_EQ(detached.size(), 1);
  WeightRegistry registry;
  ValidatedCall call;
  const absl::Status s =
      ValidateForward(request, registry, ValidationLimits(), &call, &detached);
  ASSERT_TRUE(s.ok()) << s;
  const ConvSegment& seg = call.segment;
  EXPECT_EQ(seg.x.data, x->buffer.get());
  EXPECT_EQ(seg.x.owner, x->buffer);  // the view keeps the buffer alive
  EXPECT_EQ(seg.x.bytes, 2 * 64 * 300 * 4);
  EXPECT_EQ(std::memcmp(seg.x.data, in.x.data().data(), in.x.data().size()), 0);
  EXPECT_EQ(seg.weight.data, request.inline_weights().weight().data().data());
  EXPECT_EQ(seg.initial_states.data, request.initial_states().data().data());
  EXPECT_EQ(call.total_bytes, 2 * (153600 + 1536) + 1024 + 256);

  // Without the detached tensors, x has no data.
  ValidatedCall without;
  const absl::Status s2 = ValidateForward(request, registry, ValidationLimits(), &without);
  EXPECT_EQ(s2.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s2.message(), HasSubstr("x.data has 0 bytes"));
}

TEST(WireTensorsValidation, DetachedByteCountMustMatchTheShape) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 32);
  Rng rng(test_seed);
  const Case c = LargeForwardCase(DType::kBF16);
  const Inputs in = MakeInputs(c, &rng);
  v1::ForwardRequest request = MakeForward(c, in);
  request.mutable_x()->clear_data();
  const int64_t expected = 2 * 64 * 300 * 2;
  WeightRegistry registry;
  for (int64_t bytes : {expected - 2, expected + 2, int64_t{1}}) {
    SCOPED_TRACE(bytes);
    DetachedTensors detached;
    detached.Add(&request.x(), std::shared_ptr<void>(::operator new(bytes), [](void* p) {
                   ::operator delete(p);
                 }), bytes);
    ValidatedCall call;
    const absl::Status s = ValidateForward(request, registry, ValidationLimits(), &call, &detached);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("x.data"));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("has ", bytes, " bytes, expected ", expected)));
  }
  // Backward: a wrong-sized detached dout is named as dout.
  Case b = c;
  b.op = Op::kBackward;
  const Inputs bin = MakeInputs(b, &rng);
  v1::BackwardRequest back = MakeBackward(b, bin);
  back.mutable_dout()->clear_data();
  DetachedTensors detached;
  detached.Add(&back.dout(), std::shared_ptr<void>(::operator new(10), [](void* p) {
                 ::operator delete(p);
               }), 10);
  ValidatedCall call;
  const absl::Status s = ValidateBackward(back, registry, ValidationLimits(), &call, &detached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("dout.data has 10 bytes"));
}

TEST(WireTensorsValidation, BindPutsLargeOutputsInDetachedBuffers) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 33);
  Rng rng(test_seed);
  const Case c = LargeForwardCase(DType::kF32);
  const Inputs in = MakeInputs(c, &rng);
  const v1::ForwardRequest request = MakeForward(c, in);
  WeightRegistry registry;
  const int64_t y_bytes = 2 * 64 * 300 * 4, states_bytes = 2 * 64 * 3 * 4;
  struct Want {
    int64_t min_bytes;
    bool y_detached, states_detached;
  };
  for (const Want& w : {Want{0, true, true}, Want{y_bytes, true, false},
                        Want{y_bytes + 1, false, false}, Want{-1, false, false}}) {
    SCOPED_TRACE(w.min_bytes);
    ValidatedCall call;
    ASSERT_TRUE(ValidateForward(request, registry, ValidationLimits(), &call).ok());
    RecordingAllocator alloc;
    DetachedTensors detached;
    OutputBuffers buffers;
    buffers.min_bytes = w.min_bytes;
    buffers.allocate = alloc.Get();
    buffers.detached = &detached;
    v1::ForwardResponse response;
    BindForwardResponse(&call, &response, &buffers);
    const ConvSegment& seg = call.segment;
    EXPECT_EQ(response.y().dtype(), v1::FP32);
    EXPECT_THAT(response.y().shape(), ElementsAre(2, 64, 300));
    EXPECT_THAT(response.final_states().shape(), ElementsAre(2, 64, 3));
    const DetachedTensors::Entry* y = detached.Find(&response.y());
    const DetachedTensors::Entry* st = detached.Find(&response.final_states());
    EXPECT_EQ(y != nullptr, w.y_detached);
    EXPECT_EQ(st != nullptr, w.states_detached);
    if (y != nullptr) {
      EXPECT_EQ(seg.y.data, y->buffer.get());
      EXPECT_EQ(y->bytes, y_bytes);
      EXPECT_TRUE(response.y().data().empty());
    } else {
      EXPECT_EQ(seg.y.data, response.y().data().data());
      EXPECT_EQ(static_cast<int64_t>(response.y().data().size()), y_bytes);
    }
    if (st != nullptr) {
      EXPECT_EQ(seg.final_states.data, st->buffer.get());
      EXPECT_EQ(st->bytes, states_bytes);
      EXPECT_TRUE(response.final_states().data().empty());
    } else {
      EXPECT_EQ(seg.final_states.data, response.final_states().data().data());
      EXPECT_EQ(static_cast<int64_t>(response.final_states().data().size()), states_bytes);
    }
    EXPECT_EQ(static_cast<int>(alloc.requests.size()), detached.size());
  }
}
}  // namespace
}  // namespace conv1d::e2e
