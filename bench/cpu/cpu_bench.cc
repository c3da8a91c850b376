// conv1d_cpu_bench: forward and backward throughput of the CPU backend beside
// a multi-threaded memcpy of the same bytes on the same machine.
//
// Bytes counted: forward x + y, backward x + dout + dx (weights, states and
// dweight are negligible). memcpy moves the same number of bytes (half read,
// half written) on the same thread pool. Each figure is the median of --runs
// timed runs after a warm-up, on fresh random inputs. Writes
// bench/results/cpu-<host>-<YYYY-MM-DD>.csv and prints a table.
//
// Usage: conv1d_cpu_bench [--runs=N] [--threads=N] [--out_dir=DIR] [--quick]
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
#include "server/backends/cpu/thread_pool.h"

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
  bool quick = false;
  std::string out_dir = CONV1D_BENCH_RESULTS_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--runs=", 0) == 0) runs = std::max(1, std::atoi(a.c_str() + 7));
    else if (a.rfind("--threads=", 0) == 0) threads = std::atoi(a.c_str() + 10);
    else if (a.rfind("--out_dir=", 0) == 0) out_dir = a.substr(10);
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--runs=N] [--threads=N] [--out_dir=DIR] [--quick]\n", argv[0]);
      return 2;
    }
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
  std::fprintf(csv, "case,dtype,op,median_ms,gbps,memcpy_gbps,pct_of_memcpy\n");
  std::printf("CPU backend, %d threads, W=4 SiLU bias, channel-first, median of %d runs\n",
              pool->num_threads(), runs);
  std::printf("%-12s %-5s %-8s %10s %8s %12s %8s\n", "case", "dtype", "op", "median_ms", "GB/s",
              "memcpy_GB/s", "%memcpy");
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
        if (!CpuConvSegment(key, seg, pool).ok()) return 1;  // warm-up
        std::vector<double> t;
        for (int r = 0; r < runs; ++r) {
          const auto a = std::chrono::steady_clock::now();
          if (!CpuConvSegment(key, seg, pool).ok()) return 1;
          t.push_back(Seconds(a, std::chrono::steady_clock::now()));
        }
        const double sec = Median(t);
        const double gbps = bytes / sec / 1e9;
        const double mem_gbps = bytes / MemcpySeconds(pool, bytes, runs) / 1e9;
        const double pct = 100.0 * gbps / mem_gbps;
        std::printf("%-12s %-5s %-8s %10.2f %8.2f %12.2f %7.1f%%\n", c.name, DTypeName(xt),
                    OpName(op), sec * 1e3, gbps, mem_gbps, pct);
        std::fprintf(csv, "%s,%s,%s,%.3f,%.3f,%.3f,%.1f\n", c.name, DTypeName(xt), OpName(op),
                     sec * 1e3, gbps, mem_gbps, pct);
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
