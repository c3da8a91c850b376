// Times the fused conv1d kernels (forward, backward, update) with device
// events against a 1 GiB device-to-device copy measured in the same run,
// on the shapes of shared/ANCHORS.md plus two 64-request fused launches, a
// 64-request launch of mixed lengths (ragged-mixed: L from 1..4096, each
// request its own weights) and width-8 rows (-W8; the others are W = 4).
// Writes bench/results/kernels-<device>-<date>.csv (or the path given as
// argv[1]) and prints a table with upstream causal-conv1d's %ceil beside
// ours. Beside each case it also times a device-to-device copy of the
// case's own bytes (half read, half written, rotated over as many buffers
// as the case), so that the fixed cost a launch of that size pays is
// visible: pct_of_size_copy = that copy's time over the case's time; and
// one batched-copy launch (kernels/batch_copy.h) moving the same bytes over
// as many separate ranges as the case has segments, each of its segment's
// size: pct_of_batch_copy = that launch's time over the case's time, what a
// plain copy kernel achieves on the case's ragged layout in one launch.
// Usage: conv1d_kernel_bench [out.csv] [--quick] [--only=CASE/DTYPE/OP[,...]]
// (--only runs the listed cases, e.g. for a profiler).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "kernels/batch_copy.h"
#include "kernels/conv1d_kernels.h"

namespace {

using namespace conv1d::kernels;
using conv1d::Role;

#define CHECK(x)                                                                      \
  do {                                                                                \
    hipError_t e_ = (x);                                                              \
    if (e_ != hipSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, hipGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Case {
  std::string name;
  int64_t B, D, L;
  ScalarType type;
  KernelOp op;
  KernelLayout layout;
  int nseg;
  double upstream_h100, upstream_h200;  // %ceil, 0 = none
  int width = 4;
  bool ragged = false;  // L of each segment drawn from 1..4096 (fixed seed)
};

// The sequence length of each segment of a case.
std::vector<int64_t> SegLengths(const Case& c) {
  std::vector<int64_t> ls(c.nseg, c.L);
  if (c.ragged) {
    uint64_t s = 0x5eed;
    for (auto& l : ls) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      l = 1 + static_cast<int64_t>(s % 4096);
    }
  }
  return ls;
}

// Bytes one segment of sequence length `l` moves at least once: the
// forward reads x and writes y, the backward reads x and dy and writes dx,
// the update also reads and writes its conv states (width - 1 per channel).
int64_t SegBytes(const Case& c, int64_t l) {
  const int64_t es = c.type == ScalarType::kF32 ? 4 : 2;
  const int64_t n = c.B * c.D * l;
  if (c.op == KernelOp::kForward) return 2 * n * es;
  if (c.op == KernelOp::kBackward) return 3 * n * es;
  return (2 * n + 2 * c.B * c.D * (c.width - 1)) * es;
}

// Random values in [-1, 1) in `type`, generated on the host by several
// threads and uploaded.
void FillRandom(void* dev, int64_t n, ScalarType type, uint64_t seed) {
  const int64_t es = type == ScalarType::kF32 ? 4 : 2;
  std::vector<uint8_t> host(static_cast<size_t>(n * es));
  const int nt = 16;
  std::vector<std::thread> th;
  for (int k = 0; k < nt; ++k) {
    th.emplace_back([&, k] {
      uint64_t s = seed * 0x9e3779b97f4a7c15ull + k + 1;
      for (int64_t i = n * k / nt; i < n * (k + 1) / nt; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const float f = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / (1 << 23);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if (type == ScalarType::kF32) {
          std::memcpy(&host[i * 4], &f, 4);
        } else {
          uint16_t h;
          if (type == ScalarType::kBF16) {
            h = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
          } else {  // fp16 of a value in [-1, 1): exponent rebias, truncation is fine here
            const uint32_t sign = (u >> 16) & 0x8000u;
            const int32_t ex = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
            h = ex <= 0 ? static_cast<uint16_t>(sign)
                        : static_cast<uint16_t>(sign | (ex << 10) | ((u >> 13) & 0x3ffu));
          }
          std::memcpy(&host[i * 2], &h, 2);
        }
      }
    });
  }
  for (auto& t : th) t.join();
  CHECK(hipMemcpy(dev, host.data(), host.size(), hipMemcpyHostToDevice));
}

void* DevAlloc(int64_t bytes) {
  void* p = nullptr;
  CHECK(hipMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 256))));
  return p;
}

double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `fn` (which enqueues one launch on stream 0) `iters` times after
// `warm` warm-ups; returns the median in microseconds.
template <class F>
double TimeIt(F fn, int warm, int iters) {
  for (int i = 0; i < warm; ++i) fn(i);
  CHECK(hipDeviceSynchronize());
  std::vector<hipEvent_t> ev(2 * iters);
  for (auto& e : ev) CHECK(hipEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CHECK(hipEventRecord(ev[2 * i], nullptr));
    fn(i);
    CHECK(hipEventRecord(ev[2 * i + 1], nullptr));
  }
  CHECK(hipDeviceSynchronize());
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) CHECK(hipEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CHECK(hipEventDestroy(e));
  return Median(ms) * 1000.0;
}

// One set of buffers and its planned, uploaded segment table.
struct Instance {
  std::vector<void*> bufs;
  Conv1dPlanInfo plan;
  Conv1dSegment* dtable = nullptr;
  void* ws = nullptr;
};

Instance MakeInstance(const Conv1dProblem& p, const Case& c, uint64_t seed) {
  Instance in;
  const int64_t es = c.type == ScalarType::kF32 ? 4 : 2;
  const std::vector<int64_t> ls = SegLengths(c);
  const int64_t K = p.width - 1;
  auto alloc = [&](int64_t elems, int64_t esize, bool random) {
    void* d = DevAlloc(elems * esize);
    in.bufs.push_back(d);
    if (random) FillRandom(d, elems, esize == 4 ? ScalarType::kF32 : c.type, seed++);
    return d;
  };
  std::vector<Conv1dSegment> table(c.nseg);
  for (int i = 0; i < c.nseg; ++i) {
    Conv1dSegment& s = table[i];
    const int64_t n = c.B * c.D * ls[i];
    s.batch = c.B;
    s.seqlen = ls[i];
    s.set(Role::kWeight, alloc(c.D * p.width, es, true));
    s.set(Role::kBias, alloc(c.D, es, true));
    if (p.op == KernelOp::kUpdate) {
      s.state_len = K;
      s.set(Role::kX, alloc(n, es, true));
      s.set(Role::kY, alloc(n, es, false));
      s.set(Role::kConvState, alloc(c.B * c.D * K, es, true));
      s.set(Role::kConvStateOut, s.out(Role::kConvState));
    } else if (p.op == KernelOp::kForward) {
      s.set(Role::kX, alloc(n, es, true));
      s.set(Role::kY, alloc(n, es, false));
    } else {
      s.set(Role::kX, alloc(n, es, true));
      s.set(Role::kDout, alloc(n, es, true));
      s.set(Role::kDx, alloc(n, es, false));
      s.set(Role::kDweight, alloc(c.D * p.width, 4, false));
      s.set(Role::kDbias, alloc(c.D, 4, false));
    }
  }
  CHECK(Conv1dPlan(p, table.data(), c.nseg, &in.plan));
  in.dtable = static_cast<Conv1dSegment*>(DevAlloc(c.nseg * sizeof(Conv1dSegment)));
  in.bufs.push_back(in.dtable);
  CHECK(hipMemcpy(in.dtable, table.data(), c.nseg * sizeof(Conv1dSegment), hipMemcpyHostToDevice));
  if (in.plan.workspace_bytes > 0) {
    in.ws = DevAlloc(in.plan.workspace_bytes);
    in.bufs.push_back(in.ws);
  }
  return in;
}

std::string DeviceTag(const std::string& name) {
  std::string low;
  for (char ch : name) low += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* k : {"h100", "h200", "mi300x", "mi300a", "mi300", "a100"}) {
    if (low.find(k) != std::string::npos) return k;
  }
  std::string tag;
  for (char ch : low) tag += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
  return tag;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strncmp(argv[i], "--only=", 7) == 0) only = argv[i] + 7;
    else out_path = argv[i];
  }
  int dev = 0;
  CHECK(hipGetDevice(&dev));
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, dev));
  const std::string tag = DeviceTag(prop.name);
  const bool h200 = tag == "h200";

  // Copy ceiling: 1 GiB device to device, bytes read plus written.
  const int64_t copy_bytes = int64_t{1} << 30;
  void* ca = DevAlloc(copy_bytes);
  void* cb = DevAlloc(copy_bytes);
  CHECK(hipMemset(ca, 1, copy_bytes));
  const double copy_us = TimeIt(
      [&](int) { CHECK(hipMemcpyAsync(cb, ca, copy_bytes, hipMemcpyDeviceToDevice, nullptr)); }, 3, 20);
  const double copy_gbps = 2.0 * copy_bytes / (copy_us * 1e3);
  CHECK(hipFree(ca));
  CHECK(hipFree(cb));

  const auto F32 = ScalarType::kF32, BF = ScalarType::kBF16;
  const auto FWD = KernelOp::kForward, BWD = KernelOp::kBackward, UPD = KernelOp::kUpdate;
  const auto CF = KernelLayout::kChannelFirst, CL = KernelLayout::kChannelLast;
  std::vector<Case> cases = {
      {"1x2048x128", 1, 2048, 128, F32, FWD, CF, 1, 10.3, 8.2},
      {"1x2048x128", 1, 2048, 128, F32, BWD, CF, 1, 7.5, 5.6},
      {"4x2048x2048", 4, 2048, 2048, F32, FWD, CF, 1, 85.6, 82.5},
      {"4x2048x2048", 4, 2048, 2048, F32, BWD, CF, 1, 82.7, 76.0},
      {"8x4096x4096", 8, 4096, 4096, F32, FWD, CF, 1, 96.1, 94.2},
      {"8x4096x4096", 8, 4096, 4096, F32, BWD, CF, 1, 96.7, 96.7},
      {"16x5120x2048", 16, 5120, 2048, F32, FWD, CF, 1, 95.9, 95.3},
      {"16x5120x2048", 16, 5120, 2048, F32, BWD, CF, 1, 96.4, 96.0},
      {"1x2048x128", 1, 2048, 128, BF, FWD, CF, 1, 4.8, 3.5},
      {"1x2048x128", 1, 2048, 128, BF, BWD, CF, 1, 3.3, 2.7},
      {"4x2048x2048", 4, 2048, 2048, BF, FWD, CF, 1, 76.0, 67.4},
      {"4x2048x2048", 4, 2048, 2048, BF, BWD, CF, 1, 66.2, 56.2},
      {"8x4096x4096", 8, 4096, 4096, BF, FWD, CF, 1, 94.1, 91.5},
      {"8x4096x4096", 8, 4096, 4096, BF, BWD, CF, 1, 93.0, 85.0},
      {"16x5120x2048", 16, 5120, 2048, BF, FWD, CF, 1, 92.9, 88.4},
      {"16x5120x2048", 16, 5120, 2048, BF, BWD, CF, 1, 88.8, 77.0},
      {"4x2048x2048CL", 4, 2048, 2048, F32, FWD, CL, 1, 78.2, 0},
      {"4x2048x2048CL", 4, 2048, 2048, F32, BWD, CL, 1, 69.6, 0},
      {"8x4096x4096CL", 8, 4096, 4096, F32, FWD, CL, 1, 86.6, 0},
      {"8x4096x4096CL", 8, 4096, 4096, F32, BWD, CL, 1, 74.6, 0},
      {"4x2048x2048CL", 4, 2048, 2048, BF, FWD, CL, 1, 68.9, 0},
      {"4x2048x2048CL", 4, 2048, 2048, BF, BWD, CL, 1, 51.1, 0},
      {"8x4096x4096CL", 8, 4096, 4096, BF, FWD, CL, 1, 84.7, 0},
      {"8x4096x4096CL", 8, 4096, 4096, BF, BWD, CL, 1, 51.4, 0},
      {"64x5120x1", 64, 5120, 1, F32, UPD, CF, 1, 33.2, 0},
      {"64x5120x1", 64, 5120, 1, BF, UPD, CF, 1, 14.7, 0},
      {"fused64-fp32", 1, 2048, 128, F32, FWD, CF, 64, 0, 0},
      {"fused64-fp32", 1, 2048, 128, F32, BWD, CF, 64, 0, 0},
      {"fused64-bf16", 1, 2048, 128, BF, FWD, CF, 64, 0, 0},
      {"fused64-bf16", 1, 2048, 128, BF, BWD, CF, 64, 0, 0},
      // 64 requests of 1024 tokens, 512 channels each: rows of 4 (16-bit)
      // or 8 (fp32) steps of a team.
      {"fused64-L1024", 1, 512, 1024, F32, FWD, CF, 64, 0, 0},
      {"fused64-L1024", 1, 512, 1024, F32, BWD, CF, 64, 0, 0},
      {"fused64-L1024", 1, 512, 1024, BF, FWD, CF, 64, 0, 0},
      {"fused64-L1024", 1, 512, 1024, BF, BWD, CF, 64, 0, 0},
      // 64 requests of 1 x 512 x L, L drawn from 1..4096, each its own weights.
      {"ragged-mixed", 1, 512, 0, F32, FWD, CF, 64, 0, 0, 4, true},
      {"ragged-mixed", 1, 512, 0, F32, BWD, CF, 64, 0, 0, 4, true},
      {"ragged-mixed", 1, 512, 0, BF, FWD, CF, 64, 0, 0, 4, true},
      {"ragged-mixed", 1, 512, 0, BF, BWD, CF, 64, 0, 0, 4, true},
      // Width 8 on the fast path.
      {"8x4096x4096-W8", 8, 4096, 4096, F32, FWD, CF, 1, 0, 0, 8},
      {"8x4096x4096-W8", 8, 4096, 4096, F32, BWD, CF, 1, 0, 0, 8},
      {"8x4096x4096-W8", 8, 4096, 4096, BF, FWD, CF, 1, 0, 0, 8},
      {"8x4096x4096-W8", 8, 4096, 4096, BF, BWD, CF, 1, 0, 0, 8},
      {"4x2048x2048-W8", 4, 2048, 2048, F32, FWD, CF, 1, 0, 0, 8},
      {"4x2048x2048-W8", 4, 2048, 2048, BF, BWD, CF, 1, 0, 0, 8},
      {"8x4096x4096CL-W8", 8, 4096, 4096, F32, FWD, CL, 1, 0, 0, 8},
      {"8x4096x4096CL-W8", 8, 4096, 4096, BF, BWD, CL, 1, 0, 0, 8},
      {"fused64-W8", 1, 2048, 128, BF, BWD, CF, 64, 0, 0, 8},
  };

  if (out_path.empty()) {
    char date[16];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    out_path = "bench/results/kernels-" + tag + "-" + date + ".csv";
  }
  FILE* csv = std::fopen(out_path.c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::fprintf(csv,
               "case,dtype,op,median_us,gbps,pct_of_copy,size_copy_us,pct_of_size_copy,"
               "batch_copy_us,pct_of_batch_copy\n");
  std::printf("device %s, copy ceiling %.0f GB/s (1 GiB D2D, %.1f us)\n", prop.name, copy_gbps, copy_us);
  std::printf("%-16s %-5s %-7s %10s %8s %7s %9s %12s %10s %13s %11s\n", "case", "dtype", "op",
              "median_us", "GB/s", "%copy", "upstream%", "size_copy_us", "%sizecopy",
              "batch_copy_us", "%batchcopy");
  for (const Case& c : cases) {
    const char* dt = c.type == F32 ? "fp32" : "bf16";
    const char* op = c.op == FWD ? "fwd" : c.op == BWD ? "bwd" : "update";
    if (!only.empty() && ("," + only + ",").find("," + c.name + "/" + dt + "/" + op + ",") == std::string::npos) {
      continue;
    }
    Conv1dProblem p;
    p.op = c.op;
    p.x_type = p.weight_type = c.type;
    p.grad_weight_type = ScalarType::kF32;
    p.dim = c.D;
    p.width = c.width;
    p.activation = KernelActivation::kSiLU;
    p.layout = c.layout;
    p.has_bias = true;
    int64_t bytes = 0;
    for (int64_t l : SegLengths(c)) bytes += SegBytes(c, l);
    // Rotate through enough copies that the set exceeds L2 several times.
    const int copies = static_cast<int>(std::min<int64_t>(16, std::max<int64_t>(1, (int64_t{400} << 20) / std::max<int64_t>(bytes, 1))));
    std::vector<Instance> inst;
    for (int i = 0; i < copies; ++i) inst.push_back(MakeInstance(p, c, 1000 * i + 7));
    const int iters = quick ? 20 : (bytes > (int64_t{256} << 20) ? 30 : 200);
    const double us = TimeIt(
        [&](int i) {
          const Instance& in = inst[i % copies];
          CHECK(Conv1dRun(p, in.plan, in.dtable, in.ws, in.plan.workspace_bytes, nullptr));
        },
        5, iters);
    CHECK(hipDeviceSynchronize());
    for (auto& in : inst) {
      for (void* b : in.bufs) CHECK(hipFree(b));
    }
    // The same bytes moved by a plain copy: bytes / 2 read and written,
    // rotated over `copies` source/destination pairs like the case.
    const int64_t half = bytes / 2;
    std::vector<void*> src(copies), dst(copies);
    for (int i = 0; i < copies; ++i) {
      src[i] = DevAlloc(half);
      dst[i] = DevAlloc(half);
      CHECK(hipMemset(src[i], 1, half));
    }
    const double size_copy_us = TimeIt(
        [&](int i) {
          CHECK(hipMemcpyAsync(dst[i % copies], src[i % copies], half, hipMemcpyDeviceToDevice,
                               nullptr));
        },
        5, iters);
    for (int i = 0; i < copies; ++i) {
      CHECK(hipFree(src[i]));
      CHECK(hipFree(dst[i]));
    }
    // The same bytes in one batched-copy launch, a range per segment of
    // half its bytes (16-byte multiples, so the copy moves whole vectors),
    // rotated over `copies` sets of ranges.
    std::vector<void*> copy_bufs;
    std::vector<BatchCopyChunk*> tables(copies);
    std::vector<int32_t> counts(copies, 0);
    for (int i = 0; i < copies; ++i) {
      std::vector<BatchCopyChunk> table;
      for (int64_t l : SegLengths(c)) {
        const int64_t seg_half = (SegBytes(c, l) / 2 + 15) / 16 * 16;
        void* from = DevAlloc(seg_half);
        void* to = DevAlloc(seg_half);
        copy_bufs.push_back(from);
        copy_bufs.push_back(to);
        CHECK(hipMemset(from, 1, seg_half));
        table.resize(counts[i] + BatchCopyChunksFor(seg_half));
        CHECK(BatchCopyAppend(table.data(), static_cast<int32_t>(table.size()), &counts[i], from,
                              to, seg_half)
                  ? hipSuccess
                  : hipErrorInvalidValue);
      }
      tables[i] = static_cast<BatchCopyChunk*>(DevAlloc(counts[i] * sizeof(BatchCopyChunk)));
      copy_bufs.push_back(tables[i]);
      CHECK(hipMemcpy(tables[i], table.data(), counts[i] * sizeof(BatchCopyChunk),
                      hipMemcpyHostToDevice));
    }
    const double batch_copy_us = TimeIt(
        [&](int i) { CHECK(BatchCopyRun(tables[i % copies], counts[i % copies], nullptr)); }, 5,
        iters);
    for (void* b : copy_bufs) CHECK(hipFree(b));
    const double gbps = bytes / (us * 1e3);
    const double pct = 100.0 * gbps / copy_gbps;
    const double pct_size = 100.0 * size_copy_us / us;
    const double pct_batch = 100.0 * batch_copy_us / us;
    std::fprintf(csv, "%s,%s,%s,%.2f,%.1f,%.1f,%.2f,%.1f,%.2f,%.1f\n", c.name.c_str(), dt, op, us,
                 gbps, pct, size_copy_us, pct_size, batch_copy_us, pct_batch);
    const double up = h200 ? c.upstream_h200 : c.upstream_h100;
    char upbuf[16] = "-";
    if (up > 0) std::snprintf(upbuf, sizeof upbuf, "%.1f", up);
    std::printf("%-16s %-5s %-7s %10.2f %8.1f %7.1f %9s %12.2f %10.1f %13.2f %11.1f\n",
                c.name.c_str(), dt, op, us, gbps, pct, upbuf, size_copy_us, pct_size, batch_copy_us,
                pct_batch);
    std::fflush(stdout);
  }
  std::fclose(csv);
  std::printf("wrote %s\n", out_path.c_str());
  return 0;
}
