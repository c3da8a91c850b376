#include "tests/cpu/test_util.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace conv1d::testing_cpu {

void FillRandom(std::vector<uint8_t>* out, DType t, int64_t n, std::mt19937_64& rng,
                double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  out->assign(n * DTypeSize(t), 0);
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(rng);
    if (std::fabs(v) < 1e-3) v = 0.5;
    StoreFromFloat(out->data(), t, i, static_cast<float>(v));
  }
}

std::vector<double> ToDouble(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<double> v(bytes.size() / DTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = LoadAsFloat(bytes.data(), t, i);
  return v;
}

std::vector<uint8_t> FromDouble(const std::vector<double>& v, DType t) {
  std::vector<uint8_t> bytes(v.size() * DTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) StoreFromFloat(bytes.data(), t, i, static_cast<float>(v[i]));
  return bytes;
}

BatchKey KeyWithStates(Op op, DType x_dtype, DType weight_dtype, int width, Layout layout,
                       int64_t dim, Activation activation) {
  BatchKey key;
  key.op = op;
  key.x_dtype = x_dtype;
  key.weight_dtype = weight_dtype;
  key.grad_weight_dtype = DType::kF32;
  key.dim = dim;
  key.width = width;
  key.layout = layout;
  key.has_bias = true;
  key.activation = activation;
  key.has_initial_states = op != Op::kUpdate;
  key.return_final_states = op == Op::kForward;
  key.has_dfinal_states = op == Op::kBackward;
  key.return_dinitial_states = op == Op::kBackward;
  return key;
}

ConvBuffers MakeProblem(const BatchKey& key, int64_t batch, int64_t seqlen,
                        int64_t state_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ConvBuffers p;
  p.key = key;
  p.batch = batch;
  p.seqlen = seqlen;
  p.state_len = state_len;
  const DType xt = key.x_dtype, wt = key.weight_dtype;
  const int64_t bd = batch * key.dim;
  const int64_t halo = key.width - 1;
  FillRandom(&p.x, xt, bd * seqlen, rng);
  FillRandom(&p.weight, wt, key.dim * key.width, rng, -0.7, 0.7);
  if (key.has_bias) FillRandom(&p.bias, wt, key.dim, rng);
  if (key.op != Op::kUpdate && key.has_initial_states && halo > 0) {
    FillRandom(&p.initial_states, xt, bd * halo, rng);
  }
  if (key.op == Op::kBackward) {
    FillRandom(&p.dout, xt, bd * seqlen, rng);
    if (key.has_dfinal_states && halo > 0) FillRandom(&p.dfinal_states, xt, bd * halo, rng);
  }
  if (key.op == Op::kUpdate) FillRandom(&p.conv_state, xt, bd * state_len, rng);
  return p;
}

ref::Inputs ToReference(const ConvBuffers& p) {
  ref::Inputs in;
  in.batch = p.batch;
  in.seqlen = p.seqlen;
  in.dim = p.key.dim;
  in.width = p.key.width;
  in.state_len = p.state_len;
  in.channel_last = p.key.layout == Layout::kChannelLast;
  in.silu = p.key.activation == Activation::kSiLU;
  const DType xt = p.key.x_dtype, wt = p.key.weight_dtype;
  in.x = ToDouble(p.x, xt);
  in.dout = ToDouble(p.dout, xt);
  in.weight = ToDouble(p.weight, wt);
  in.bias = ToDouble(p.bias, wt);
  in.initial_states = ToDouble(p.initial_states, xt);
  in.dfinal_states = ToDouble(p.dfinal_states, xt);
  in.conv_state = ToDouble(p.conv_state, xt);
  return in;
}

void AllocatePoisoned(ConvBuffers* p) {
  p->AllocateOutputs();
  for (auto* v : {&p->y, &p->final_states, &p->dx, &p->dweight, &p->dbias,
                  &p->dinitial_states, &p->conv_state_out}) {
    // An absent output is an empty vector with no storage to poison.
    if (!v->empty()) std::memset(v->data(), 0xff, v->size());
  }
}

ref::Outputs RunReference(const ConvBuffers& p) {
  const ref::Inputs in = ToReference(p);
  switch (p.key.op) {
    case Op::kForward: return ref::Forward(in);
    case Op::kBackward: return ref::Backward(in);
    case Op::kUpdate: return ref::Update(in);
  }
  return {};
}

namespace {
double Ulp(DType t) {
  switch (t) {
    case DType::kF32: return 0x1p-23;
    case DType::kF16: return 0x1p-10;
    case DType::kBF16: return 0x1p-7;
  }
  return 0;
}
double Tiny(DType t) { return t == DType::kF16 ? 0x1p-24 : 1e-37; }
}  // namespace

::testing::AssertionResult Close(const std::string& name, const std::vector<uint8_t>& got,
                                 DType t, const std::vector<double>& ref,
                                 const std::vector<double>& scale, double acc_eps) {
  const std::vector<double> g = ToDouble(got, t);
  if (g.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << name << ": size " << g.size() << " != reference " << ref.size();
  }
  int failures = 0;
  std::string msg;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = Ulp(t) * std::fabs(ref[i]) + acc_eps * scale[i] + Tiny(t);
    if (!(std::fabs(g[i] - ref[i]) <= tol)) {
      if (++failures <= 5) {
        absl::StrAppend(&msg, "\n  ", name, "[", i, "] = ", g[i], ", reference ", ref[i],
                        ", tolerance ", tol);
      }
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << g.size()
                                       << " elements differ" << msg;
}

void ExpectMatchesReference(const ConvBuffers& p, const ref::Outputs& r,
                            const std::string& context) {
  SCOPED_TRACE(context);
  const DType xt = p.key.x_dtype, gt = p.key.grad_weight_dtype;
  // fp32 accumulation: a few ulps per term magnitude, more for long sums.
  constexpr double kEps = 8 * 0x1p-24;
  auto exact = [](size_t n) { return std::vector<double>(n, 0.0); };
  switch (p.key.op) {
    case Op::kForward:
      EXPECT_TRUE(Close("y", p.y, xt, r.y, r.y_scale, kEps));
      if (!p.final_states.empty()) {
        EXPECT_TRUE(Close("final_states", p.final_states, xt, r.final_states,
                          exact(r.final_states.size()), 0));
      }
      break;
    case Op::kBackward:
      EXPECT_TRUE(Close("dx", p.dx, xt, r.dx, r.dx_scale, 4 * kEps));
      EXPECT_TRUE(Close("dweight", p.dweight, gt, r.dweight, r.dweight_scale, 4 * kEps));
      if (!p.dbias.empty()) {
        EXPECT_TRUE(Close("dbias", p.dbias, gt, r.dbias, r.dbias_scale, 4 * kEps));
      }
      if (!p.dinitial_states.empty()) {
        EXPECT_TRUE(Close("dinitial_states", p.dinitial_states, xt, r.dinitial_states,
                          r.dinitial_states_scale, 4 * kEps));
      }
      break;
    case Op::kUpdate:
      EXPECT_TRUE(Close("y", p.y, xt, r.y, r.y_scale, kEps));
      EXPECT_TRUE(Close("conv_state_out", p.conv_state_out, xt, r.conv_state_out,
                        exact(r.conv_state_out.size()), 0));
      break;
  }
}

}  // namespace conv1d::testing_cpu
