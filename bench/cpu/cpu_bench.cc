// conv1d_cpu_bench: forward and backward throughput of the CPU backend beside
// a multi-threaded memcpy of the same bytes on the same machine.
//
// Bytes counted: forward x + y, backward x + dout + dx (weights, states and
// dweight are negligible). memcpy moves the same number of bytes (half read,
// half written) on the same thread pool. Each figure is the median of --runs
// timed runs after a warm-up, on fresh random inputs. --isa=all times every
// instruction set this CPU runs (baseline, avx2, avx512) back to back on the
// same inputs, beside one memcpy figure. Writes
// bench/results/cpu-<host>-<YYYY-MM-DD>.csv (with the 1-minute load average
// per row: the figures mean little on a loaded machine) and prints a table.
// --check first verifies every ISA's row conversions bit for bit against
// server/core/dtype.h (all 16-bit codes and a sweep of fp32 values).
//
// Usage: conv1d_cpu_bench [--runs=N] [--threads=N] [--out_dir=DIR] [--quick]
//                         [--isa=best|baseline|avx2|avx512|all] [--check]
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "server/backends/cpu/cpu_conv.h"
#include "server/backends/cpu/cpu_conv_internal.h"
#include "server/util/thread_pool.h"

namespace conv1d {
namespace {

struct Case {
  const char* name;
  int64_t batch, dim, seqlen;
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void FillRandom(std::vector<uint8_t>* v, DType t, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  v->resize(n * DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(v->data(), t, i, dist(rng));
}

// Median seconds of a parallel memcpy moving `bytes_moved` bytes.
double MemcpySeconds(ThreadPool* pool, int64_t bytes_moved, int runs) {
  const int64_t n = bytes_moved / 2;
  std::vector<uint8_t> src(n), dst(n);
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t i = 0; i < n; i += 4096) src[i] = static_cast<uint8_t>(rng());
  constexpr int64_t kBlock = 1 << 20;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto copy = [&] {
    pool->ParallelFor(blocks, 1, [&](int64_t b, int64_t e) {
      const int64_t begin = b * kBlock, end = std::min(n, e * kBlock);
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    });
  };
  copy();  // warm-up, also faults the pages in
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto a = std::chrono::steady_clock::now();
    copy();
    t.push_back(Seconds(a, std::chrono::steady_clock::now()));
  }
  return Median(t);
}

double LoadAverage() {
  double load[1] = {-1.0};
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

// Bit-exact agreement of one ISA's row conversions with dtype.h. Rows start
// at odd offsets and have odd lengths so that vector bodies and tails both run.
bool CheckConversions(cpu_internal::Isa isa) {
  const cpu_internal::IsaKernels* k = cpu_internal::KernelsFor(isa);
  int64_t bad = 0;
  std::vector<uint16_t> codes(65536 + 3);
  for (int64_t i = 0; i < 65536; ++i) codes[i + 3] = static_cast<uint16_t>(i);
  std::vector<float> f(codes.size());
  std::vector<uint16_t> back(codes.size());
  for (DType t : {DType::kF16, DType::kBF16}) {
    k->load_row(t, codes.data(), 3, 65536, f.data() + 3);
    for (int64_t i = 0; i < 65536; ++i) {
      const float want = LoadAsFloat(codes.data(), t, i + 3);
      if (std::memcmp(&want, &f[i + 3], 4) != 0) ++bad;
    }
  }
  // fp32 sweep: a stride of 2^14 + 1 through all bit patterns, each with
  // neighbours at the 16-bit rounding boundaries: subnormals, ties,
  // overflow, Inf and NaN payloads of both signs.
  std::vector<float> vals;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += (uint64_t{1} << 14) + 1) {
    for (uint32_t d : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u}) {
      const uint32_t bits = static_cast<uint32_t>(u) + d;
      float v;
      std::memcpy(&v, &bits, 4);
      vals.push_back(v);
    }
  }
  vals.push_back(0.0f);
  std::vector<uint16_t> out(vals.size() + 1);
  for (DType t : {DType::kF16, DType::kBF16}) {
    k->store_row(t, out.data(), 1, static_cast<int64_t>(vals.size()), vals.data());
    for (size_t i = 0; i < vals.size(); ++i) {
      const uint16_t w = t == DType::kF16 ? FloatToHalf(vals[i]) : FloatToBF16(vals[i]);
      if (w != out[i + 1]) ++bad;
    }
  }
  std::printf("conversion check %-8s %s (%lld mismatches)\n", cpu_internal::IsaName(isa),
              bad == 0 ? "ok" : "FAILED", static_cast<long long>(bad));
  return bad == 0;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
  return buf;
}

std::string Host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "debian";
  return buf;
}

int Main(int argc, char** argv) {
  int runs = 7, threads = 0;
  bool quick = false, check = false;
  std::string isa_flag = "best";
  std::string out_dir = CONV1D_BENCH_RESULTS_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--runs=", 0) == 0) runs = std::max(1, std::atoi(a.c_str() + 7));
    else if (a.rfind("--threads=", 0) == 0) threads = std::atoi(a.c_str() + 10);
    else if (a.rfind("--out_dir=", 0) == 0) out_dir = a.substr(10);
    else if (a == "--quick") quick = true;
    else if (a == "--check") check = true;
    else if (a.rfind("--isa=", 0) == 0) isa_flag = a.substr(6);
    else {
      std::fprintf(stderr,
                   "usage: %s [--runs=N] [--threads=N] [--out_dir=DIR] [--quick] "
                   "[--isa=best|baseline|avx2|avx512|all] [--check]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<cpu_internal::Isa> isas;
  for (int i = 0; i < cpu_internal::kNumIsas; ++i) {
    const auto isa = static_cast<cpu_internal::Isa>(i);
    if (cpu_internal::KernelsFor(isa) == nullptr) continue;
    if (isa_flag == "all" || isa_flag == cpu_internal::IsaName(isa)) isas.push_back(isa);
  }
  if (isa_flag == "best") isas = {cpu_internal::DefaultIsa()};
  if (isas.empty()) {
    std::fprintf(stderr, "--isa=%s is not available on this CPU\n", isa_flag.c_str());
    return 2;
  }
  if (check) {
    bool ok = true;
    for (cpu_internal::Isa isa : isas) ok = CheckConversions(isa) && ok;
    if (!ok) return 1;
  }
  auto pool_or = ThreadPool::Create(ThreadPoolOptions{.threads = threads});
  if (!pool_or.ok()) {
    std::fprintf(stderr, "%s\n", std::string(pool_or.status().message()).c_str());
    return 1;
  }
  ThreadPool* pool = pool_or->get();
  std::vector<Case> cases = {{"4x2048x2048", 4, 2048, 2048}, {"8x1024x4096", 8, 1024, 4096}};
  if (quick) cases = {{"2x256x1024", 2, 256, 1024}};
  std::mt19937_64 rng(std::random_device{}());

  const std::string path = out_dir + "/cpu-" + Host() + "-" + Today() + ".csv";
  std::FILE* csv = std::fopen(path.c_str(), "w");
  if (csv == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  std::fprintf(csv, "case,dtype,op,median_ms,gbps,memcpy_gbps,pct_of_memcpy,isa,load_avg_1m\n");
  std::printf("CPU backend, %d threads, W=4 SiLU bias, channel-first, median of %d runs, "
              "load average %.2f\n",
              pool->num_threads(), runs, LoadAverage());
  std::printf("%-12s %-5s %-8s %-8s %10s %8s %12s %8s %6s\n", "case", "dtype", "op", "isa",
              "median_ms", "GB/s", "memcpy_GB/s", "%memcpy", "load");
  for (const Case& c : cases) {
    for (DType xt : {DType::kF32, DType::kBF16}) {
      for (Op op : {Op::kForward, Op::kBackward}) {
        BatchKey key;
        key.op = op;
        key.x_dtype = key.weight_dtype = xt;
        key.grad_weight_dtype = DType::kF32;
        key.dim = c.dim;
        key.width = 4;
        key.activation = Activation::kSiLU;
        key.has_bias = true;
        ConvBuffers p;
        p.key = key;
        p.batch = c.batch;
        p.seqlen = c.seqlen;
        const int64_t n = c.batch * c.dim * c.seqlen;
        FillRandom(&p.x, xt, n, rng);
        FillRandom(&p.weight, xt, c.dim * 4, rng);
        FillRandom(&p.bias, xt, c.dim, rng);
        if (op == Op::kBackward) FillRandom(&p.dout, xt, n, rng);
        p.AllocateOutputs();
        const ConvSegment seg = p.Segment();
        const int64_t bytes = n * DTypeSize(xt) * (op == Op::kForward ? 2 : 3);
        const double mem_gbps = bytes / MemcpySeconds(pool, bytes, runs) / 1e9;
        for (cpu_internal::Isa isa : isas) {
          cpu_internal::SetActiveIsa(isa);
          if (!CpuConvSegment(key, seg, pool).ok()) return 1;  // warm-up
          std::vector<double> t;
          for (int r = 0; r < runs; ++r) {
            const auto a = std::chrono::steady_clock::now();
            if (!CpuConvSegment(key, seg, pool).ok()) return 1;
            t.push_back(Seconds(a, std::chrono::steady_clock::now()));
          }
          const double sec = Median(t);
          const double gbps = bytes / sec / 1e9;
          const double pct = 100.0 * gbps / mem_gbps;
          const double load = LoadAverage();
          std::printf("%-12s %-5s %-8s %-8s %10.2f %8.2f %12.2f %7.1f%% %6.2f\n", c.name,
                      DTypeName(xt), OpName(op), cpu_internal::IsaName(isa), sec * 1e3, gbps,
                      mem_gbps, pct, load);
          std::fprintf(csv, "%s,%s,%s,%.3f,%.3f,%.3f,%.1f,%s,%.2f\n", c.name, DTypeName(xt),
                       OpName(op), sec * 1e3, gbps, mem_gbps, pct, cpu_internal::IsaName(isa),
                       load);
        }
        cpu_internal::SetActiveIsa(cpu_internal::DefaultIsa());
      }
    }
  }
  std::fclose(csv);
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace
}  // namespace conv1d

int main(int argc, char** argv) { return conv1d::Main(argc, argv); }
