// SessionManager with HostStateSlots and the CPU backend: session steps run
// as the update tasks the manager builds (one RunBatch each, or fused), and
// their results are compared with the float64 reference's Forward over the
// whole sequence. Idle expiry runs on a FakeClock.
#include "server/core/session_manager.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_backend.h"
#include "server/core/fake_clock.h"
#include "server/core/scheduler.h"
#include "server/core/state_slots.h"
#include "tests/common/reference.h"
#include "tests/common/test_seed.h"
#include "tests/cpu/test_util.h"

namespace conv1d {
namespace {

using testing_cpu::Close;
using testing_cpu::FillRandom;
using testing_cpu::FromDouble;
using testing_cpu::ToDouble;

struct Problem {
  DType dtype = DType::kF32;
  Layout layout = Layout::kChannelFirst;
  int64_t batch = 2, dim = 5, width = 4, state_len = 3;
  int32_t max_draft = 0;
  std::vector<uint8_t> weight, bias;
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = *CpuBackend::Create(CpuBackendOptions{.threads = 1, .lanes = 1});
    StateSlotsOptions so;
    so.slot_bytes = 64 << 10;
    so.num_slots = 4;
    slots_ = *HostStateSlots::Create(so);
    SessionManagerOptions mo;
    mo.idle_timeout_s = 10;
    manager_ = *SessionManager::Create(mo, slots_.get(), &clock_, nullptr);
  }

  Problem MakeProblem(DType dtype, Layout layout, uint64_t seed) {
    Problem p;
    p.dtype = dtype;
    p.layout = layout;
    std::mt19937_64 rng(seed);
    FillRandom(&p.weight, dtype, p.dim * p.width, rng);
    FillRandom(&p.bias, dtype, p.dim, rng);
    return p;
  }

  SessionSpec Spec(const Problem& p) {
    SessionSpec spec;
    spec.key.op = Op::kUpdate;
    spec.key.x_dtype = spec.key.weight_dtype = spec.key.grad_weight_dtype = p.dtype;
    spec.key.dim = p.dim;
    spec.key.width = static_cast<int32_t>(p.width);
    spec.key.activation = Activation::kSiLU;
    spec.key.layout = p.layout;
    spec.key.has_bias = true;
    spec.batch = p.batch;
    spec.state_len = p.state_len;
    spec.max_draft_tokens = p.max_draft;
    spec.weight = TensorView{p.dtype, Shape{p.dim, p.width}, p.weight.data(),
                             static_cast<int64_t>(p.weight.size())};
    spec.bias = TensorView{p.dtype, Shape{p.dim}, p.bias.data(),
                           static_cast<int64_t>(p.bias.size())};
    return spec;
  }

  std::shared_ptr<Session> Open(const Problem& p, const void* state = nullptr,
                                bool attached = false) {
    absl::StatusOr<std::shared_ptr<Session>> s = manager_->Open(Spec(p), state, attached);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }

  // Tokens [t0, t0 + n) of x (the whole sequence, [B,D,L] or [B,L,D]).
  std::vector<uint8_t> Slice(const Problem& p, const std::vector<uint8_t>& x, int64_t len,
                             int64_t t0, int64_t n) {
    const int64_t e = DTypeSize(p.dtype);
    std::vector<uint8_t> out(p.batch * p.dim * n * e);
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.layout == Layout::kChannelFirst) {
        for (int64_t d = 0; d < p.dim; ++d) {
          std::memcpy(&out[((b * p.dim + d) * n) * e], &x[((b * p.dim + d) * len + t0) * e],
                      n * e);
        }
      } else {
        std::memcpy(&out[b * n * p.dim * e], &x[(b * len + t0) * p.dim * e], n * p.dim * e);
      }
    }
    return out;
  }

  // Runs one step of `x` ([B,D,n] / [B,n,D]) and returns y.
  std::vector<uint8_t> Step(Session& s, const Problem& p, const std::vector<uint8_t>& x,
                            int64_t n) {
    const Shape shape = p.layout == Layout::kChannelFirst ? Shape{p.batch, p.dim, n}
                                                          : Shape{p.batch, n, p.dim};
    std::vector<uint8_t> y(x.size(), 0xff);
    TensorView xv{p.dtype, shape, x.data(), static_cast<int64_t>(x.size())};
    OutputView yv{p.dtype, shape, y.data(), static_cast<int64_t>(y.size())};
    BatchKey key;
    ConvSegment seg;
    absl::Status st = manager_->BeginStep(s, xv, yv, &key, &seg);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return y;
    ConvSegment* segs[] = {&seg};
    st = backend_->RunBatch(0, key, segs, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    manager_->EndStep(s, st, true);
    return y;
  }

  std::vector<uint8_t> Export(Session& s, const Problem& p) {
    std::vector<uint8_t> out(p.batch * p.dim * p.state_len * DTypeSize(p.dtype));
    EXPECT_TRUE(manager_->Export(s, out.data()).ok());
    return out;
  }

  // The reference over the whole sequence x (length len) from zeros.
  ref::Outputs Reference(const Problem& p, const std::vector<uint8_t>& x, int64_t len) {
    ref::Inputs in;
    in.batch = p.batch;
    in.seqlen = len;
    in.dim = p.dim;
    in.width = p.width;
    in.channel_last = p.layout == Layout::kChannelLast;
    in.silu = true;
    in.x = ToDouble(x, p.dtype);
    in.weight = ToDouble(p.weight, p.dtype);
    in.bias = ToDouble(p.bias, p.dtype);
    return ref::Forward(in);
  }

  // The last K inputs of every row of x (len >= K).
  std::vector<uint8_t> LastK(const Problem& p, const std::vector<uint8_t>& x, int64_t len) {
    const int64_t e = DTypeSize(p.dtype), k = p.state_len;
    std::vector<uint8_t> out(p.batch * p.dim * k * e);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t d = 0; d < p.dim; ++d) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t t = len - k + i;
          const int64_t xi = p.layout == Layout::kChannelFirst ? (b * p.dim + d) * len + t
                                                               : (b * len + t) * p.dim + d;
          std::memcpy(&out[((b * p.dim + d) * k + i) * e], &x[xi * e], e);
        }
      }
    }
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<HostStateSlots> slots_;
  std::unique_ptr<SessionManager> manager_;
};

// y of a whole sequence assembled from the y of its steps.
void Place(const Problem& p, const std::vector<uint8_t>& y, int64_t t0, int64_t n,
           int64_t len, std::vector<uint8_t>* all) {
  const int64_t e = DTypeSize(p.dtype);
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.layout == Layout::kChannelFirst) {
      for (int64_t d = 0; d < p.dim; ++d) {
        std::memcpy(&(*all)[((b * p.dim + d) * len + t0) * e], &y[((b * p.dim + d) * n) * e],
                    n * e);
      }
    } else {
      std::memcpy(&(*all)[(b * len + t0) * p.dim * e], &y[b * n * p.dim * e], n * p.dim * e);
    }
  }
}

class ChainTest : public SessionTest, public ::testing::WithParamInterface<DType> {};

TEST_P(ChainTest, ThousandOneTokenStepsEqualOneForward) {
  CONV1D_TEST_SEED_SCOPE(seed, 1234 + static_cast<int>(GetParam()));
  Problem p = MakeProblem(GetParam(), Layout::kChannelFirst, seed);
  const int64_t len = 1000;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> x;
  FillRandom(&x, p.dtype, p.batch * p.dim * len, rng);
  std::shared_ptr<Session> s = Open(p);
  ASSERT_NE(s, nullptr);
  std::vector<uint8_t> y(x.size());
  for (int64_t t = 0; t < len; ++t) Place(p, Step(*s, p, Slice(p, x, len, t, 1), 1), t, 1, len, &y);
  const ref::Outputs r = Reference(p, x, len);
  EXPECT_TRUE(Close("y", y, p.dtype, r.y, r.y_scale, 1e-6));
  EXPECT_EQ(Export(*s, p), LastK(p, x, len));
}

INSTANTIATE_TEST_SUITE_P(DTypes, ChainTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16));

TEST_F(SessionTest, MixedStepSizesChannelLastEqualOneForward) {
  CONV1D_TEST_SEED_SCOPE(seed, 77);
  Problem p = MakeProblem(DType::kF32, Layout::kChannelLast, seed);
  p.state_len = 6;  // longer than W-1
  std::mt19937_64 rng(seed);
  const int64_t len = 200;
  std::vector<uint8_t> x;
  FillRandom(&x, p.dtype, p.batch * p.dim * len, rng);
  std::shared_ptr<Session> s = Open(p);
  ASSERT_NE(s, nullptr);
  std::vector<uint8_t> y(x.size());
  for (int64_t t = 0; t < len;) {
    const int64_t n = std::min<int64_t>(len - t, 1 + static_cast<int64_t>(rng() % 9));
    Place(p, Step(*s, p, Slice(p, x, len, t, n), n), t, n, len, &y);
    t += n;
  }
  const ref::Outputs r = Reference(p, x, len);
  EXPECT_TRUE(Close("y", y, p.dtype, r.y, r.y_scale, 1e-6));
  EXPECT_EQ(Export(*s, p), LastK(p, x, len));
}

TEST_F(SessionTest, InitialStateIsTheSequenceBeforeTheSteps) {
  CONV1D_TEST_SEED_SCOPE(seed, 5);
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, seed);
  p.max_draft = 2;
  std::mt19937_64 rng(seed);
  const int64_t len = 40, head = 10;
  std::vector<uint8_t> x;
  FillRandom(&x, p.dtype, p.batch * p.dim * len, rng);
  std::shared_ptr<Session> s = Open(p, LastK(p, Slice(p, x, len, 0, head), head).data());
  ASSERT_NE(s, nullptr);
  std::vector<uint8_t> y(x.size());
  Place(p, Step(*s, p, Slice(p, x, len, head, len - head), len - head), head, len - head, len,
        &y);
  const ref::Outputs r = Reference(p, x, len);
  // Only y after the head was computed by the session.
  std::vector<uint8_t> got = Slice(p, y, len, head, len - head);
  std::vector<double> want, scale;
  const std::vector<uint8_t> idx_want = Slice(p, FromDouble(r.y, DType::kF32), len, head, len - head);
  want = ToDouble(idx_want, DType::kF32);
  scale = ToDouble(Slice(p, FromDouble(r.y_scale, DType::kF32), len, head, len - head),
                   DType::kF32);
  EXPECT_TRUE(Close("y", got, p.dtype, want, scale, 1e-6));
  EXPECT_EQ(Export(*s, p), LastK(p, x, len));
}

TEST_F(SessionTest, CommitEqualsNeverSendingTheRejectedTokens) {
  CONV1D_TEST_SEED_SCOPE(seed, 99);
  Problem p = MakeProblem(DType::kBF16, Layout::kChannelFirst, seed);
  p.state_len = 5;
  p.max_draft = 4;
  std::mt19937_64 rng(seed);
  std::shared_ptr<Session> spec = Open(p);  // speculates, commits
  std::shared_ptr<Session> plain = Open(p);  // gets accepted tokens only
  ASSERT_NE(spec, nullptr);
  ASSERT_NE(plain, nullptr);
  for (int round = 0; round < 30; ++round) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 5);  // up to 5 = 1 + max_draft
    // At most max_draft_tokens = 4 rejected.
    const int64_t accepted = std::max<int64_t>(n - 4, static_cast<int64_t>(rng() % (n + 1)));
    std::vector<uint8_t> x;
    FillRandom(&x, p.dtype, p.batch * p.dim * n, rng);
    const std::vector<uint8_t> y_spec = Step(*spec, p, x, n);
    ASSERT_TRUE(manager_->Commit(*spec, accepted).ok()) << "round " << round;
    if (accepted == 0) continue;
    const std::vector<uint8_t> y_plain =
        Step(*plain, p, Slice(p, x, n, 0, accepted), accepted);
    EXPECT_EQ(Slice(p, y_spec, n, 0, accepted), y_plain) << "round " << round;
    ASSERT_EQ(Export(*spec, p), Export(*plain, p)) << "round " << round;
  }
}

TEST_F(SessionTest, CommitRules) {
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, 3);
  p.max_draft = 2;
  std::shared_ptr<Session> s = Open(p);
  ASSERT_NE(s, nullptr);
  absl::Status st = manager_->Commit(*s, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  CONV1D_TEST_SEED_SCOPE(test_seed, 3);
  std::mt19937_64 rng(test_seed);
  std::vector<uint8_t> x;
  FillRandom(&x, p.dtype, p.batch * p.dim * 4, rng);
  Step(*s, p, x, 4);
  st = manager_->Commit(*s, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("accepted"), std::string::npos) << st;
  st = manager_->Commit(*s, 1);  // rejects 3 > max_draft_tokens 2
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("max_draft_tokens"), std::string::npos) << st;
  EXPECT_TRUE(manager_->Commit(*s, 2).ok());
  st = manager_->Commit(*s, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
}

TEST_F(SessionTest, ForkThenDivergingChains) {
  CONV1D_TEST_SEED_SCOPE(seed, 11);
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, seed);
  std::mt19937_64 rng(seed);
  const int64_t head = 12, tail = 9, len = head + tail;
  std::vector<uint8_t> a, b;
  FillRandom(&a, p.dtype, p.batch * p.dim * len, rng);
  FillRandom(&b, p.dtype, p.batch * p.dim * len, rng);
  // b shares a's first `head` tokens.
  for (int64_t r = 0; r < p.batch * p.dim; ++r) {
    std::memcpy(&b[r * len * 4], &a[r * len * 4], head * 4);
  }
  std::shared_ptr<Session> s = Open(p);
  ASSERT_NE(s, nullptr);
  Step(*s, p, Slice(p, a, len, 0, head), head);
  absl::StatusOr<std::shared_ptr<Session>> f = manager_->Fork(*s);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE((*f)->id(), s->id());
  EXPECT_NE((*f)->slot(), s->slot());
  const std::vector<uint8_t> ya = Step(*s, p, Slice(p, a, len, head, tail), tail);
  const std::vector<uint8_t> yb = Step(**f, p, Slice(p, b, len, head, tail), tail);
  for (const auto& [x, y] : {std::make_pair(&a, &ya), std::make_pair(&b, &yb)}) {
    const ref::Outputs r = Reference(p, *x, len);
    std::vector<uint8_t> want = Slice(p, FromDouble(r.y, DType::kF32), len, head, tail);
    std::vector<uint8_t> scale = Slice(p, FromDouble(r.y_scale, DType::kF32), len, head, tail);
    EXPECT_TRUE(Close("y", *y, p.dtype, ToDouble(want, DType::kF32),
                      ToDouble(scale, DType::kF32), 1e-6));
  }
  EXPECT_EQ(Export(*s, p), LastK(p, a, len));
  EXPECT_EQ(Export(**f, p), LastK(p, b, len));
}

TEST_F(SessionTest, FullPoolRefusesAndNeverEvicts) {
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, 1);
  std::vector<std::shared_ptr<Session>> open;
  for (int i = 0; i < 4; ++i) open.push_back(Open(p));
  absl::StatusOr<std::shared_ptr<Session>> more = manager_->Open(Spec(p), nullptr, false);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(manager_->Fork(*open[0]).status().code(), absl::StatusCode::kResourceExhausted);
  for (const auto& s : open) EXPECT_TRUE(manager_->Find(s->id()).ok());
  EXPECT_TRUE(manager_->Close(*open[1]).ok());
  EXPECT_EQ(manager_->Find(open[1]->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Close(*open[1]).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(manager_->Open(Spec(p), nullptr, false).ok());
}

// With no random bytes to be had, Open and Fork answer UNAVAILABLE, make
// no id and keep no slot; they work again once the source does.
TEST_F(SessionTest, NoRandomBytesRefusesOpenAndForkAndLeaksNoSlot) {
  // Draws to refuse, and draws so far (shared with the manager's source,
  // which may outlive this body's locals).
  struct Source {
    int fail_next = 0;
    int draws = 0;
  };
  auto source = std::make_shared<Source>();
  int& fail_next = source->fail_next;
  SessionManagerOptions mo;
  mo.idle_timeout_s = 10;
  mo.random_bytes = [source](absl::Span<uint8_t> out) {
    ++source->draws;
    if (source->fail_next > 0) {
      --source->fail_next;
      return absl::UnavailableError("no entropy today");
    }
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<uint8_t>(source->draws * 31 + static_cast<int>(i));
    }
    return absl::OkStatus();
  };
  manager_.reset();
  manager_ = *SessionManager::Create(mo, slots_.get(), &clock_, nullptr);
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, 1);

  fail_next = 1;
  absl::StatusOr<std::shared_ptr<Session>> refused = manager_->Open(Spec(p), nullptr, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("cannot make a session id: no entropy today"),
            std::string::npos)
      << refused.status();

  std::shared_ptr<Session> first = Open(p);
  ASSERT_NE(first, nullptr);
  fail_next = 1;
  EXPECT_EQ(manager_->Fork(*first).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(manager_->Find(first->id()).ok());  // the source is untouched

  // Neither refusal kept a slot: all four (num_slots) open, then the pool
  // is full.
  std::vector<std::shared_ptr<Session>> open = {first};
  for (int i = 0; i < 2; ++i) open.push_back(Open(p));
  absl::StatusOr<std::shared_ptr<Session>> forked = manager_->Fork(*first);
  ASSERT_TRUE(forked.ok()) << forked.status();
  open.push_back(*forked);
  std::set<std::string> ids;
  for (const auto& s : open) ids.insert(s->id());
  EXPECT_EQ(ids.size(), open.size());
  EXPECT_EQ(manager_->Open(Spec(p), nullptr, false).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SessionTest, StateLargerThanASlotIsRefusedNamingTheFields) {
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, 1);
  p.state_len = 64 << 10;
  absl::StatusOr<std::shared_ptr<Session>> s = manager_->Open(Spec(p), nullptr, false);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("session_state_bytes"), std::string::npos);
}

// Ids of 5000 opens and 5000 forks, in the order the manager made them.
std::vector<std::string> TenThousandIds(SessionManager& manager, const SessionSpec& spec) {
  std::vector<std::string> ids;
  ids.reserve(10000);
  for (int i = 0; i < 5000; ++i) {
    absl::StatusOr<std::shared_ptr<Session>> s = manager.Open(spec, nullptr, false);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) break;
    absl::StatusOr<std::shared_ptr<Session>> f = manager.Fork(**s);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) break;
    ids.push_back((*s)->id());
    ids.push_back((*f)->id());
    EXPECT_TRUE(manager.Close(**s).ok());
    EXPECT_TRUE(manager.Close(**f).ok());
  }
  return ids;
}

TEST_F(SessionTest, IdsAreDistinctAndAreSThen32LowercaseHexDigits) {
  const std::vector<std::string> ids =
      TenThousandIds(*manager_, Spec(MakeProblem(DType::kF32, Layout::kChannelFirst, 1)));
  ASSERT_EQ(ids.size(), 10000u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
  for (const std::string& id : ids) {
    ASSERT_EQ(id.size(), 33u) << id;
    ASSERT_EQ(id[0], 's') << id;
    for (char c : id.substr(1)) {
      ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
    }
  }
}

// What a counter, a clock or any other steady source would show: consecutive
// ids sharing a long prefix, or some group of digits moving by the same step
// from one id to the next much more often than chance. Digit windows are
// aligned at the end of the ids, so this holds whatever their lengths.
TEST_F(SessionTest, ConsecutiveIdsShowNoCommonPrefixOrConstantStep) {
  const std::vector<std::string> ids =
      TenThousandIds(*manager_, Spec(MakeProblem(DType::kF32, Layout::kChannelFirst, 1)));
  ASSERT_EQ(ids.size(), 10000u);
  size_t min_len = ids[0].size();
  for (const std::string& id : ids) min_len = std::min(min_len, id.size());
  ASSERT_GT(min_len, 1u);
  const int pairs = static_cast<int>(ids.size()) - 1;
  for (int i = 0; i < pairs; ++i) {
    const std::string& a = ids[i];
    const std::string& b = ids[i + 1];
    size_t common = 0;
    while (common < std::min(a.size(), b.size()) && a[common] == b[common]) ++common;
    // "s" and 8 equal hex digits: odds of about 2 * 10^-6 over all pairs of
    // random ids.
    ASSERT_LT(common, 9u) << a << " then " << b;
  }
  auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (int width = 1; width <= 4; ++width) {
    const int64_t modulus = int64_t{1} << (4 * width);
    const double expected = static_cast<double>(pairs) / static_cast<double>(modulus);
    // Uniform steps: the largest of `modulus` counts is within a few standard
    // deviations of `expected`; a constant step puts every pair in one.
    const double limit = expected + 8 * std::sqrt(expected) + 8;
    for (size_t end = width; end < min_len; ++end) {  // window [len - end, len - end + width)
      std::map<int64_t, int> steps;
      int most = 0;
      for (int i = 0; i < pairs; ++i) {
        int64_t va = 0, vb = 0;
        for (int k = 0; k < width; ++k) {
          va = va * 16 + digit(ids[i][ids[i].size() - end + k]);
          vb = vb * 16 + digit(ids[i + 1][ids[i + 1].size() - end + k]);
        }
        most = std::max(most, ++steps[((vb - va) % modulus + modulus) % modulus]);
      }
      EXPECT_LE(most, limit) << "the " << width << "-digit window " << end - width
                             << " digits from the end steps by one value in " << most
                             << " of " << pairs << " pairs";
    }
  }
}

TEST_F(SessionTest, IdleSessionsExpireOnTheClock) {
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, 1);
  std::shared_ptr<Session> idle = Open(p);
  std::shared_ptr<Session> busy = Open(p);
  std::shared_ptr<Session> streamed = Open(p, nullptr, /*attached=*/true);
  clock_.Advance(absl::Seconds(9));
  EXPECT_EQ(manager_->ExpireIdle(), 0);
  std::vector<uint8_t> state(p.batch * p.dim * p.state_len * 4);
  ASSERT_TRUE(manager_->Export(*busy, state.data()).ok());  // an operation: not idle
  clock_.Advance(absl::Seconds(1));
  // The reaper thread may expire it first, on the same clock: either way
  // `idle` is gone and `busy` (used a second ago) is not.
  EXPECT_LE(manager_->ExpireIdle(), 1);
  EXPECT_EQ(manager_->Find(idle->id()).status().code(), absl::StatusCode::kNotFound);
  absl::Status st = manager_->Export(*idle, state.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("expired"), std::string::npos) << st;
  EXPECT_TRUE(manager_->Find(busy->id()).ok());
  // The reaper thread expires `busy` once the clock passes its deadline.
  clock_.AwaitWaiters(1);
  clock_.Advance(absl::Seconds(11));
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (manager_->Find(busy->id()).ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(manager_->Find(busy->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(manager_->Find(streamed->id()).ok());  // attached: never expires
  EXPECT_EQ(manager_->open_sessions(), 1);
  EXPECT_EQ(manager_->free_slots(), 3);
}

// Counts what the scheduler reports about session steps.
class StepCounter final : public Observer {
 public:
  void OnSessionStepsPerLaunch(int32_t steps) override {
    absl::MutexLock lock(&mu_);
    launches_.push_back(steps);
  }
  std::vector<int32_t> launches() {
    absl::MutexLock lock(&mu_);
    return launches_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int32_t> launches_;
};

TEST_F(SessionTest, StepsOfManySessionsFuseIntoOneBackendCall) {
  CONV1D_TEST_SEED_SCOPE(seed, 123);
  Problem p = MakeProblem(DType::kF32, Layout::kChannelFirst, seed);
  StepCounter counter;
  SchedulerOptions so;
  so.max_batch_requests = 4;
  so.max_queue_delay_us = 10'000'000;  // wait (on the fake clock) for 4 steps
  so.completion_threads = 0;
  auto scheduler = *Scheduler::Create(so, backend_.get(), &clock_, &counter);
  std::mt19937_64 rng(seed);
  const int64_t len = 7;
  std::vector<std::vector<uint8_t>> xs(4), ys(4);
  std::vector<std::shared_ptr<Session>> sessions;
  for (int i = 0; i < 4; ++i) {
    FillRandom(&xs[i], p.dtype, p.batch * p.dim * len, rng);
    ys[i].assign(xs[i].size(), 0xff);
    sessions.push_back(Open(p));
  }
  absl::Mutex mu;
  int done = 0;
  for (int64_t t = 0; t < len; ++t) {
    std::vector<std::vector<uint8_t>> step_x(4), step_y(4);
    for (int i = 0; i < 4; ++i) {
      step_x[i] = Slice(p, xs[i], len, t, 1);
      step_y[i].assign(step_x[i].size(), 0xff);
      auto task = std::make_unique<Task>();
      TensorView xv{p.dtype, Shape{p.batch, p.dim, 1}, step_x[i].data(),
                    static_cast<int64_t>(step_x[i].size())};
      OutputView yv{p.dtype, Shape{p.batch, p.dim, 1}, step_y[i].data(),
                    static_cast<int64_t>(step_y[i].size())};
      ASSERT_TRUE(manager_->BeginStep(*sessions[i], xv, yv, &task->key, &task->segment).ok());
      task->session_step = true;
      task->on_done = [&, s = sessions[i]](const absl::Status& st, const TaskTimings& tm) {
        EXPECT_TRUE(st.ok()) << st;
        manager_->EndStep(*s, st, tm.reached_backend);
        absl::MutexLock lock(&mu);
        ++done;
      };
      ASSERT_TRUE(scheduler->Submit(&task).ok());
    }
    const int want = static_cast<int>((t + 1) * 4);
    auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done == want; };
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&reached));
    for (int i = 0; i < 4; ++i) Place(p, step_y[i], t, 1, len, &ys[i]);
  }
  scheduler->Shutdown();
  for (int i = 0; i < 4; ++i) {
    const ref::Outputs r = Reference(p, xs[i], len);
    EXPECT_TRUE(Close("y", ys[i], p.dtype, r.y, r.y_scale, 1e-6)) << "session " << i;
  }
  EXPECT_EQ(counter.launches(), std::vector<int32_t>(len, 4));
}

TEST(HostStateSlotsTest, ShiftRightMovesEachRowAndZeroesItsHead) {
  auto slots = *HostStateSlots::Create(StateSlotsOptions{.slot_bytes = 64, .num_slots = 2});
  const float rows[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  ASSERT_TRUE(slots->Write(1, 0, rows, sizeof(rows)).ok());
  ASSERT_TRUE(slots->ShiftRight(1, 2, 4, 4, 1).ok());
  float got[2][4];
  ASSERT_TRUE(slots->Read(1, 0, got, sizeof(got)).ok());
  const float want[2][4] = {{0, 1, 2, 3}, {0, 5, 6, 7}};
  EXPECT_EQ(std::memcmp(got, want, sizeof(got)), 0);
  EXPECT_EQ(slots->Write(1, 60, rows, 8).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace conv1d
