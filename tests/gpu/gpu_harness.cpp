// See gpu_harness.h.
#include "tests/gpu/gpu_harness.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "server/core/dtype.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

int64_t ElemSize(ScalarType t) { return t == ScalarType::kF32 ? 4 : 2; }

double ToDouble(ScalarType t, const uint8_t* p) {
  if (t == ScalarType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == ScalarType::kF16 ? HalfToFloat(h) : BF16ToFloat(h);
}

void FromFloat(ScalarType t, float f, uint8_t* p) {
  if (t == ScalarType::kF32) {
    std::memcpy(p, &f, 4);
    return;
  }
  const uint16_t h = t == ScalarType::kF16 ? FloatToHalf(f) : FloatToBF16(f);
  std::memcpy(p, &h, 2);
}

HostTensor Empty(ScalarType t, int64_t n) {
  HostTensor h;
  h.type = t;
  h.n = n;
  h.bytes.assign(static_cast<size_t>(n * ElemSize(t)), 0xff);
  return h;
}

struct DeviceArena {
  std::vector<void*> ptrs;
  std::string err;
  ~DeviceArena() {
    for (void* p : ptrs) hipFree(p);
  }
  // `extra` bytes before the tensor let a caller misalign it.
  uint8_t* Alloc(int64_t bytes, int64_t extra = 0) {
    void* p = nullptr;
    if (hipMalloc(&p, static_cast<size_t>(bytes + extra + 16)) != hipSuccess) {
      err = "hipMalloc failed";
      return nullptr;
    }
    ptrs.push_back(p);
    return static_cast<uint8_t*>(p) + extra;
  }
  const void* Upload(const HostTensor& h, int64_t extra = 0) {
    if (h.n == 0) return nullptr;
    uint8_t* d = Alloc(static_cast<int64_t>(h.bytes.size()), extra);
    if (d) hipMemcpy(d, h.bytes.data(), h.bytes.size(), hipMemcpyHostToDevice);
    return d;
  }
  void* Poisoned(const HostTensor& h, int64_t extra = 0) {
    if (h.n == 0) return nullptr;
    uint8_t* d = Alloc(static_cast<int64_t>(h.bytes.size()), extra);
    if (d) hipMemset(d, 0xff, h.bytes.size());
    return d;
  }
};

void Download(const void* d, HostTensor* h) {
  if (d && h->n > 0) hipMemcpy(h->bytes.data(), d, h->bytes.size(), hipMemcpyDeviceToHost);
}

}  // namespace

bool HaveDevice() {
  int n = 0;
  return hipGetDeviceCount(&n) == hipSuccess && n > 0;
}

std::vector<double> HostTensor::Values() const {
  std::vector<double> v(static_cast<size_t>(n));
  const int64_t es = ElemSize(type);
  for (int64_t i = 0; i < n; ++i) v[i] = ToDouble(type, bytes.data() + i * es);
  return v;
}

HostTensor RandomTensor(ScalarType type, int64_t n, double scale, std::mt19937_64& rng) {
  HostTensor h = Empty(type, n);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t es = ElemSize(type);
  for (int64_t i = 0; i < n; ++i) FromFloat(type, static_cast<float>(scale) * u(rng), h.bytes.data() + i * es);
  return h;
}

void MakeInputs(const Conv1dProblem& p, SegmentData* s, std::mt19937_64& rng) {
  const int64_t B = s->batch, D = p.dim, L = s->seqlen, W = p.width, K = W - 1;
  const ScalarType xt = p.x_type, wt = p.weight_type;
  s->x = RandomTensor(xt, B * D * L, 1.0, rng);
  s->weight = RandomTensor(wt, D * W, 0.5, rng);
  if (p.has_bias) s->bias = RandomTensor(wt, D, 0.5, rng);
  switch (p.op) {
    case KernelOp::kForward:
      if (p.has_initial_states) s->init = RandomTensor(xt, B * D * K, 1.0, rng);
      s->y = Empty(xt, B * D * L);
      if (p.return_final_states) s->final_states = Empty(xt, B * D * K);
      break;
    case KernelOp::kBackward:
      if (p.has_initial_states) s->init = RandomTensor(xt, B * D * K, 1.0, rng);
      s->dout = RandomTensor(xt, B * D * L, 1.0, rng);
      if (p.has_dfinal_states) s->dfinal = RandomTensor(xt, B * D * K, 1.0, rng);
      s->dx = Empty(xt, B * D * L);
      s->dweight = Empty(p.grad_weight_type, D * W);
      if (p.has_bias) s->dbias = Empty(p.grad_weight_type, D);
      if (p.return_dinitial_states) s->dinit = Empty(xt, B * D * K);
      break;
    case KernelOp::kUpdate:
      s->state = RandomTensor(xt, B * D * s->state_len, 1.0, rng);
      s->y = Empty(xt, B * D * L);
      s->state_out = Empty(xt, B * D * s->state_len);
      break;
  }
}

namespace {

// Uploads every segment's inputs and poisoned outputs into `arena` and
// fills `table` in the order of `segs`; `off` bytes misalign activations.
void UploadSegments(std::vector<SegmentData>* segs, int64_t off, DeviceArena* arena,
                    std::vector<Conv1dSegment>* table) {
  table->assign(segs->size(), Conv1dSegment{});
  for (size_t i = 0; i < segs->size(); ++i) {
    SegmentData& s = (*segs)[i];
    Conv1dSegment& t = (*table)[i];
    t.batch = s.batch;
    t.seqlen = s.seqlen;
    t.state_len = s.state_len;
    t.set(Role::kX, arena->Upload(s.x, off));
    t.set(Role::kWeight, arena->Upload(s.weight));
    t.set(Role::kBias, arena->Upload(s.bias));
    t.set(Role::kInitialStates, arena->Upload(s.init));
    t.set(Role::kDout, arena->Upload(s.dout, off));
    t.set(Role::kDfinalStates, arena->Upload(s.dfinal));
    t.set(Role::kConvState, arena->Upload(s.state));
    t.set(Role::kY, arena->Poisoned(s.y, off));
    t.set(Role::kFinalStates, arena->Poisoned(s.final_states));
    t.set(Role::kDx, arena->Poisoned(s.dx, off));
    t.set(Role::kDweight, arena->Poisoned(s.dweight));
    t.set(Role::kDbias, arena->Poisoned(s.dbias));
    t.set(Role::kDinitialStates, arena->Poisoned(s.dinit));
    // state_out == nullptr-sized means in place: the test marks that by an
    // empty state_out tensor with state data present.
    t.set(Role::kConvStateOut, s.state_out.n > 0 ? arena->Poisoned(s.state_out) : t.out(Role::kConvState));
  }
}

// A fused launch ready to run: the segments on the device, the planned
// table there too, the workspace (filled with garbage, which must not
// matter), and where each segment of the caller's order sits in the
// planned table (the plan orders it by kernel family).
struct Placed {
  DeviceArena arena;
  std::vector<Conv1dSegment> table;
  kernels::Conv1dPlanInfo plan;
  Conv1dSegment* dtable = nullptr;
  void* ws = nullptr;
  std::vector<size_t> at;
};

// Places `segs` (activations misaligned by `off` bytes): "" or what failed.
std::string Place(const Conv1dProblem& p, std::vector<SegmentData>* segs, int64_t off,
                  Placed* out) {
  UploadSegments(segs, off, &out->arena, &out->table);
  if (!out->arena.err.empty()) return out->arena.err;
  std::vector<Conv1dSegment>& table = out->table;
  const hipError_t e =
      kernels::Conv1dPlan(p, table.data(), static_cast<int32_t>(table.size()), &out->plan);
  if (e != hipSuccess) return std::string("plan: ") + hipGetErrorString(e);
  out->dtable = reinterpret_cast<Conv1dSegment*>(
      out->arena.Alloc(static_cast<int64_t>(table.size() * sizeof(Conv1dSegment))));
  const int64_t ws_bytes = out->plan.workspace_bytes;
  out->ws = ws_bytes > 0 ? out->arena.Alloc(ws_bytes) : nullptr;
  if (!out->arena.err.empty()) return out->arena.err;
  hipMemcpy(out->dtable, table.data(), table.size() * sizeof(Conv1dSegment), hipMemcpyHostToDevice);
  if (out->ws) hipMemset(out->ws, 0xff, static_cast<size_t>(ws_bytes));
  out->at.assign(table.size(), 0);
  for (size_t j = 0; j < table.size(); ++j) out->at[static_cast<size_t>(table[j].source_index)] = j;
  return "";
}

// The output roles of a segment and the host tensor each one lands in.
std::vector<std::pair<Role, HostTensor*>> Outputs(SegmentData* s) {
  return {{Role::kY, &s->y},           {Role::kFinalStates, &s->final_states},
          {Role::kDx, &s->dx},         {Role::kDweight, &s->dweight},
          {Role::kDbias, &s->dbias},   {Role::kDinitialStates, &s->dinit}};
}

}  // namespace

std::string RunFused(const Conv1dProblem& p, std::vector<SegmentData>* segs, bool misalign,
                     int repeats) {
  Placed l;
  const std::string err = Place(p, segs, misalign ? ElemSize(p.x_type) : 0, &l);
  if (!err.empty()) return err;
  hipError_t e = hipSuccess;
  for (int r = 0; r < repeats && e == hipSuccess; ++r) {
    e = kernels::Conv1dRun(p, l.plan, l.dtable, l.ws, l.plan.workspace_bytes, nullptr);
  }
  if (e == hipSuccess) e = hipDeviceSynchronize();
  if (e != hipSuccess) return std::string("run: ") + hipGetErrorString(e);
  for (size_t i = 0; i < segs->size(); ++i) {
    SegmentData& s = (*segs)[i];
    const Conv1dSegment& t = l.table[l.at[i]];
    for (auto& [role, host] : Outputs(&s)) Download(t.out(role), host);
    if (s.state_out.n > 0) {
      Download(t.out(Role::kConvStateOut), &s.state_out);
    } else if (s.state.n > 0) {
      s.state_out = s.state;
      Download(t.out(Role::kConvStateOut), &s.state_out);
    }
  }
  e = hipGetLastError();
  return e == hipSuccess ? "" : std::string("copy: ") + hipGetErrorString(e);
}

std::string RunFusedInStreamOrder(const Conv1dProblem& p, const std::vector<SegmentData>& segs,
                                  int repeats, std::vector<std::vector<SegmentData>>* runs) {
  std::vector<SegmentData> in = segs;
  Placed l;
  const std::string err = Place(p, &in, 0, &l);
  if (!err.empty()) return err;
  hipStream_t stream = nullptr;
  if (hipStreamCreate(&stream) != hipSuccess) return "hipStreamCreate failed";
  runs->assign(static_cast<size_t>(repeats), in);
  hipError_t e = hipSuccess;
  for (int r = 0; r < repeats && e == hipSuccess; ++r) {
    for (size_t i = 0; i < in.size(); ++i) {
      for (auto& [role, host] : Outputs(&(*runs)[r][i])) {
        void* d = l.table[l.at[i]].out(role);
        if (d && host->n > 0) hipMemsetAsync(d, 0xff, host->bytes.size(), stream);
      }
    }
    e = kernels::Conv1dRun(p, l.plan, l.dtable, l.ws, l.plan.workspace_bytes, stream);
    for (size_t i = 0; i < in.size() && e == hipSuccess; ++i) {
      for (auto& [role, host] : Outputs(&(*runs)[r][i])) {
        const void* d = l.table[l.at[i]].out(role);
        if (d && host->n > 0) {
          hipMemcpyAsync(host->bytes.data(), d, host->bytes.size(), hipMemcpyDeviceToHost, stream);
        }
      }
    }
  }
  const hipError_t sync = hipStreamSynchronize(stream);
  hipStreamDestroy(stream);
  if (e != hipSuccess) return std::string("run: ") + hipGetErrorString(e);
  if (sync != hipSuccess) return std::string("stream: ") + hipGetErrorString(sync);
  e = hipGetLastError();
  return e == hipSuccess ? "" : std::string("copy: ") + hipGetErrorString(e);
}

std::string Compare(const std::string& what, const HostTensor& got, const std::vector<double>& ref,
                    double tol) {
  if (static_cast<size_t>(got.n) != ref.size()) return what + ": size mismatch";
  const std::vector<double> g = got.Values();
  double ss = 0.0;
  for (double r : ref) ss += r * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(g[i] - ref[i]);
    if (!std::isfinite(g[i]) || !(err <= tol * (std::fabs(ref[i]) + rms) + 1e-30)) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << g[i] << ", reference " << ref[i] << " (tol " << tol
         << ", rms " << rms << ")";
      return os.str();
    }
  }
  return "";
}

double Tolerance(ScalarType t) {
  switch (t) {
    case ScalarType::kF32: return 2e-5;
    case ScalarType::kF16: return 2e-3;
    case ScalarType::kBF16: return 1.6e-2;
  }
  return 0.0;
}

}  // namespace conv1d::testing
