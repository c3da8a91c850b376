// See gpu_check.h.
#include "tests/gpu/gpu_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "gtest/gtest.h"
#include "tests/common/reference.h"

namespace conv1d::testing {

using kernels::KernelActivation;
using kernels::KernelLayout;
using kernels::KernelOp;


ref::Inputs RefInputsOf(const Conv1dProblem& p, const SegmentData& s) {
  ref::Inputs in;
  in.batch = s.batch;
  in.dim = p.dim;
  in.seqlen = s.seqlen;
  in.width = p.width;
  in.state_len = s.state_len;
  in.channel_last = p.layout == KernelLayout::kChannelLast;
  in.silu = p.activation == KernelActivation::kSiLU;
  in.x = s.x.Values();
  in.weight = s.weight.Values();
  if (p.has_bias) in.bias = s.bias.Values();
  if (p.op != KernelOp::kUpdate && p.has_initial_states) in.initial_states = s.init.Values();
  if (p.op == KernelOp::kBackward) {
    in.dout = s.dout.Values();
    if (p.has_dfinal_states) in.dfinal_states = s.dfinal.Values();
  }
  if (p.op == KernelOp::kUpdate) in.conv_state = s.state.Values();
  return in;
}

std::mt19937_64 TestRng() {
  uint64_t seed = 0;
  const char* env = std::getenv("CONV1D_TEST_SEED");
  if (env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 0);
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[ seed     ] %s.%s seed=%llu (replay: CONV1D_TEST_SEED=%llu --gtest_filter=%s.%s)\n",
              t ? t->test_suite_name() : "?", t ? t->name() : "?",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              t ? t->test_suite_name() : "*", t ? t->name() : "*");
  std::fflush(stdout);
  return std::mt19937_64(seed);
}

// Checks every output of every segment against the reference.
std::string CheckAll(const Conv1dProblem& p, const std::vector<SegmentData>& segs) {
  const double tol = Tolerance(p.x_type);
  for (size_t i = 0; i < segs.size(); ++i) {
    const SegmentData& s = segs[i];
    const ref::Inputs in = RefInputsOf(p, s);
    const std::string tag = "segment " + std::to_string(i) + " ";
    std::string err;
    if (p.op == KernelOp::kForward) {
      const ref::Outputs r = ref::Forward(in);
      err = Compare(tag + "y", s.y, r.y, tol);
      if (err.empty() && p.return_final_states) err = Compare(tag + "final", s.final_states, r.final_states, tol);
    } else if (p.op == KernelOp::kBackward) {
      const ref::Outputs r = ref::Backward(in);
      const double gtol = std::max(Tolerance(p.grad_weight_type), 1e-4);
      err = Compare(tag + "dx", s.dx, r.dx, tol);
      if (err.empty()) err = Compare(tag + "dweight", s.dweight, r.dweight, gtol);
      if (err.empty() && p.has_bias) err = Compare(tag + "dbias", s.dbias, r.dbias, gtol);
      if (err.empty() && p.return_dinitial_states) err = Compare(tag + "dinit", s.dinit, r.dinitial_states, tol);
    } else {
      const ref::Outputs r = ref::Update(in);
      err = Compare(tag + "y", s.y, r.y, tol);
      if (err.empty()) err = Compare(tag + "state", s.state_out, r.conv_state_out, tol);
    }
    if (!err.empty()) return err;
  }
  return "";
}

std::string Describe(const Conv1dProblem& p, const std::vector<SegmentData>& segs) {
  std::string s = "op=" + std::to_string(static_cast<int>(p.op)) +
                  " x=" + std::to_string(static_cast<int>(p.x_type)) +
                  " w=" + std::to_string(static_cast<int>(p.weight_type)) +
                  " gw=" + std::to_string(static_cast<int>(p.grad_weight_type)) +
                  " D=" + std::to_string(p.dim) + " W=" + std::to_string(p.width) +
                  (p.layout == KernelLayout::kChannelLast ? " CL" : " CF") +
                  (p.activation == KernelActivation::kSiLU ? " silu" : "") +
                  (p.has_bias ? " bias" : "") + (p.has_initial_states ? " init" : "") +
                  (p.return_final_states ? " final" : "") + (p.has_dfinal_states ? " dfinal" : "") +
                  (p.return_dinitial_states ? " dinit" : "");
  for (const auto& g : segs) s += " [B=" + std::to_string(g.batch) + " L=" + std::to_string(g.seqlen) + "]";
  return s;
}

std::string RunOneSegment(const Conv1dProblem& p, int64_t batch, int64_t seqlen,
                          std::mt19937_64& rng) {
  std::vector<SegmentData> segs(1);
  segs[0].batch = batch;
  segs[0].seqlen = seqlen;
  MakeInputs(p, &segs[0], rng);
  std::string err = RunFused(p, &segs);
  if (err.empty()) err = CheckAll(p, segs);
  return err.empty() ? err : err + " " + Describe(p, segs);
}

std::vector<size_t> EveryNth(size_t n, size_t every) {
  std::vector<size_t> out;
  for (size_t i = 0; i < n; i += every) out.push_back(i);
  return out;
}

void ExpectFusedEqualSeparate(const Conv1dProblem& p, const std::vector<SegmentData>& segs,
                              const std::vector<size_t>& alone) {
  // Long tables are not spelled out in messages.
  const std::vector<SegmentData> none;
  const std::vector<SegmentData>& described = segs.size() <= 16 ? segs : none;
  std::vector<SegmentData> fused = segs;
  ASSERT_EQ(RunFused(p, &fused), "") << Describe(p, described);
  ASSERT_EQ(CheckAll(p, fused), "") << Describe(p, described);
  constexpr std::pair<const char*, HostTensor SegmentData::*> kOutputs[] = {
      {"y", &SegmentData::y},         {"final_states", &SegmentData::final_states},
      {"dx", &SegmentData::dx},       {"dweight", &SegmentData::dweight},
      {"dbias", &SegmentData::dbias}, {"dinitial_states", &SegmentData::dinit}};
  for (size_t i : alone) {
    ASSERT_LT(i, segs.size());
    std::vector<SegmentData> one{segs[i]};
    ASSERT_EQ(RunFused(p, &one), "") << "segment " << i << " alone: " << Describe(p, one);
    ASSERT_EQ(CheckAll(p, one), "") << "segment " << i << " alone: " << Describe(p, one);
    for (const auto& [name, out] : kOutputs) {
      EXPECT_EQ((fused[i].*out).bytes, (one[0].*out).bytes)
          << name << " of segment " << i << " alone: " << Describe(p, one);
    }
  }
}

Conv1dProblem MakeProblem(KernelOp op, Pair pr, KernelLayout layout, int64_t D, int W, uint32_t bits) {
  Conv1dProblem p;
  p.op = op;
  p.x_type = pr.x;
  p.weight_type = pr.w;
  p.grad_weight_type = (bits & 32) ? pr.w : ScalarType::kF32;
  p.dim = D;
  p.width = W;
  p.layout = layout;
  p.activation = (bits & 1) ? KernelActivation::kSiLU : KernelActivation::kNone;
  p.has_bias = bits & 2;
  p.has_initial_states = bits & 4;
  p.return_final_states = op == KernelOp::kForward && (bits & 8);
  p.has_dfinal_states = op == KernelOp::kBackward && (bits & 8);
  p.return_dinitial_states = op == KernelOp::kBackward && (bits & 16);
  return p;
}


kernels::Conv1dPlanInfo PlanShapes(const Conv1dProblem& p,
                                   const std::vector<std::array<int64_t, 2>>& shapes,
                                   std::vector<Conv1dSegment>* table) {
  alignas(256) static char arena[1 << 16];
  const int n = static_cast<int>(shapes.size());
  table->assign(static_cast<size_t>(n), Conv1dSegment{});
  for (int i = 0; i < n; ++i) {
    (*table)[i].batch = shapes[i][0];
    (*table)[i].seqlen = shapes[i][1];
    for (int r = 0; r < kNumRoles; ++r) (*table)[i].set(RoleAt(r), arena + 256 * (i % 16) + 16 * r);
  }
  kernels::Conv1dPlanInfo plan;
  EXPECT_EQ(kernels::Conv1dPlan(p, table->data(), n, &plan), hipSuccess);
  return plan;
}

}  // namespace conv1d::testing
