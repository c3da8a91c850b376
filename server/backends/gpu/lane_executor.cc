#include "server/backends/gpu/lane_executor.h"

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "server/util/thread_pool.h"

namespace conv1d::gpu {
namespace {

constexpr int64_t kCopyChunkBytes = int64_t{1} << 20;
constexpr int64_t kInlineCopyBytes = int64_t{256} << 10;

// Runs the memcpys on `pool` (large ones cut into chunks); inline when the
// total is small.
void ParallelCopy(ThreadPool* pool, const std::vector<CopyJob>& jobs) {
  int64_t total = 0;
  for (const CopyJob& j : jobs) total += j.bytes;
  if (pool == nullptr || total <= kInlineCopyBytes) {
    for (const CopyJob& j : jobs) std::memcpy(j.dst, j.src, j.bytes);
    return;
  }
  // Chunk index -> (job, offset) through a prefix of chunk counts.
  absl::InlinedVector<int64_t, 64> first_chunk(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    first_chunk[i + 1] =
        first_chunk[i] + std::max<int64_t>(1, (jobs[i].bytes + kCopyChunkBytes - 1) /
                                                  kCopyChunkBytes);
  }
  pool->ParallelFor(first_chunk.back(), 1, [&](int64_t begin, int64_t end) {
    size_t j = std::upper_bound(first_chunk.begin(), first_chunk.end(), begin) -
               first_chunk.begin() - 1;
    for (int64_t c = begin; c < end; ++c) {
      while (c >= first_chunk[j + 1]) ++j;
      const int64_t off = (c - first_chunk[j]) * kCopyChunkBytes;
      const int64_t n = std::min(kCopyChunkBytes, jobs[j].bytes - off);
      if (n > 0) {
        std::memcpy(static_cast<char*>(jobs[j].dst) + off,
                    static_cast<const char*>(jobs[j].src) + off, n);
      }
    }
  });
}

int64_t Total(const std::vector<LaneCopy>& copies) {
  int64_t bytes = 0;
  for (const LaneCopy& c : copies) bytes += c.bytes;
  return bytes;
}

// The kernel's view of one tensor: the lane slot, the request's own memory
// or the resident weights.
void* AddressOf(const RoundPlan::Tensor& t, char* lane_buffer, const DeviceWeights* resident,
                Role role) {
  switch (t.move) {
    case Move::kNone:
      return nullptr;
    case Move::kResident:
      return const_cast<void*>(role == Role::kWeight ? resident->weight : resident->bias);
    case Move::kInPlace:
      return const_cast<void*>(t.external);
    default:
      return t.lane_offset < 0 ? nullptr : lane_buffer + t.lane_offset;
  }
}

// Converts weights the kernels do not take in their dtype to fp32 staging;
// weights in device memory are copied back first.
absl::Status ConvertWeights(const BatchKey& key, const ConvSegment& seg, Role role,
                            float* dst) {
  const int64_t n = role == Role::kWeight ? key.dim * key.width : key.dim;
  const void* src = seg.data(role);
  thread_local std::vector<char> host_copy;
  if (seg.where(role).on_device()) {
    const int64_t bytes = n * DTypeSize(key.weight_dtype);
    host_copy.resize(static_cast<size_t>(bytes));
    absl::Status st = GpuStatus(
        hipMemcpy(host_copy.data(), src, static_cast<size_t>(bytes), hipMemcpyDeviceToHost),
        absl::StrCat("copying ", RoleName(role), " back from device memory"));
    if (!st.ok()) return st;
    src = host_copy.data();
  }
  for (int64_t k = 0; k < n; ++k) dst[k] = LoadAsFloat(src, key.weight_dtype, k);
  return absl::OkStatus();
}

// Appends copy-kernel chunks; false when the table is full (the plan keeps
// within it, so this is a check, not a decision).
bool AppendChunks(const std::vector<LaneCopy>& copies, bool to_device, char* lane_buffer,
                  kernels::BatchCopyChunk* table, int32_t* count) {
  for (const LaneCopy& c : copies) {
    char* lane = lane_buffer + c.lane_offset;
    void* host = const_cast<void*>(c.host);
    const bool ok = to_device
                        ? kernels::BatchCopyAppend(table, kCopyTableEntries, count, c.host, lane,
                                                   c.bytes)
                        : kernels::BatchCopyAppend(table, kCopyTableEntries, count, lane, host,
                                                   c.bytes);
    if (!ok) return false;
  }
  return true;
}

}  // namespace

void StoreFloats(void* dst, DType dtype, const float* src, int64_t n) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
}

absl::Status StoreOutputFloats(const OutputView& out, DType dtype, const float* src,
                               int64_t n) {
  if (!out.where.on_device()) {
    StoreFloats(out.data, dtype, src, n);
    return absl::OkStatus();
  }
  thread_local std::vector<char> host_copy;
  const int64_t bytes = n * DTypeSize(dtype);
  host_copy.resize(static_cast<size_t>(bytes));
  StoreFloats(host_copy.data(), dtype, src, n);
  return GpuStatus(
      hipMemcpy(out.data, host_copy.data(), static_cast<size_t>(bytes), hipMemcpyHostToDevice),
      "copying a weight gradient to device memory");
}

absl::Status ExecuteRound(GpuBackend::Lane& lane, GpuBackend::Device& dev,
                          const RoundPlan& plan, const RoundContext& ctx, BatchStats* stats) {
  const BatchKey& key = *ctx.key;
  const Round& round = *ctx.round;
  const GpuBackendOptions& options = *ctx.options;
  const absl::Time pack_start = absl::Now();

  // The segment table, weight conversions and host copies into staging.
  lane.table.assign(round.pieces.size(), kernels::Conv1dSegment{});
  for (size_t p = 0; p < round.pieces.size(); ++p) {
    const Piece& pc = round.pieces[p];
    const ConvSegment& seg = *ctx.segments[pc.segment];
    kernels::Conv1dSegment& t = lane.table[p];
    for (int i = 0; i < kNumRoles; ++i) {
      const Role role = RoleAt(i);
      const RoundPlan::Tensor& tensor = plan.tensors[p][i];
      t.set(role, AddressOf(tensor, lane.buffer, &ctx.resident[pc.segment], role));
      if (tensor.move == Move::kConvert) {
        absl::Status st = ConvertWeights(
            key, seg, role, reinterpret_cast<float*>(lane.pinned + tensor.lane_offset));
        if (!st.ok()) return st;
      }
    }
    t.batch = pc.b_count;
    t.seqlen = seg.seqlen;
    t.state_len = seg.state_len;
  }
  kernels::Conv1dPlanInfo info;
  hipError_t err = kernels::Conv1dPlan(*ctx.problem, lane.table.data(),
                                       static_cast<int32_t>(lane.table.size()), &info);
  if (err != hipSuccess) return GpuStatus(err, "planning the fused launch");
  if (info.workspace_bytes > lane.workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the fused launch needs ", info.workspace_bytes,
        " bytes of kernel workspace, more than workspace_bytes=", lane.workspace_bytes));
  }
  std::memcpy(lane.pinned + round.table_offset, lane.table.data(),
              lane.table.size() * sizeof(kernels::Conv1dSegment));
  std::vector<CopyJob>& jobs = lane.jobs;
  jobs.clear();
  for (const LaneCopy& c : plan.pack) jobs.push_back({lane.pinned + c.lane_offset, c.host, c.bytes});
  ParallelCopy(ctx.pack_pool, jobs);
  stats->staged_bytes += Total(plan.pack);
  stats->pack_seconds += absl::ToDoubleSeconds(absl::Now() - pack_start);

  // DMAs: staged runs first, then the request's own page-locked tensors.
  std::vector<AsyncCopy>& h2d = lane.h2d;
  std::vector<AsyncCopy>& d2h = lane.d2h;
  h2d.clear();
  d2h.clear();
  for (const LaneCopy& r : plan.h2d_runs) {
    h2d.push_back({lane.buffer + r.lane_offset, lane.pinned + r.lane_offset, r.bytes});
  }
  for (const LaneCopy& c : plan.dma_in) h2d.push_back({lane.buffer + c.lane_offset, c.host, c.bytes});
  for (const LaneCopy& r : plan.d2h_runs) {
    d2h.push_back({lane.pinned + r.lane_offset, lane.buffer + r.lane_offset, r.bytes});
  }
  for (const LaneCopy& c : plan.dma_out) {
    d2h.push_back({const_cast<void*>(c.host), lane.buffer + c.lane_offset, c.bytes});
  }
  int32_t n_gather = 0, n_scatter = 0;
  if (!AppendChunks(plan.gather, true, lane.buffer, lane.gather_table, &n_gather) ||
      !AppendChunks(plan.scatter, false, lane.buffer, lane.scatter_table, &n_scatter)) {
    return absl::InternalError("the transfer plan overflows the lane's copy tables");
  }
  int64_t dma_bytes = 0;
  for (const AsyncCopy& c : h2d) dma_bytes += c.bytes;
  for (const AsyncCopy& c : d2h) dma_bytes += c.bytes;
  // Only DMAs decide: the copy engines move one transfer per direction
  // best, so long ones are ordered on the shared streams, while the copy
  // kernels of different lanes use the bus better side by side.
  const bool shared = dev.h2d_stream != nullptr && dma_bytes >= options.shared_copy_min_bytes;
  hipStream_t in_stream = shared ? dev.h2d_stream : lane.stream;
  hipStream_t out_stream = shared ? dev.d2h_stream : lane.stream;
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  const char* what = "queueing the H2D copy";
  {
    absl::MutexLockMaybe lock(shared ? &dev.h2d_mu : nullptr);
    err = hipEventRecord(lane.events[0], in_stream);
    if (err == hipSuccess) {
      err = MemcpyAsyncMany(h2d, hipMemcpyHostToDevice, in_stream, options.batch_copies,
                            &h2d_bytes);
    }
    if (err == hipSuccess && n_gather > 0) {
      what = "gathering small host tensors";
      err = kernels::BatchCopyRun(lane.gather_table, n_gather, in_stream);
      h2d_bytes += Total(plan.gather);
    }
    if (err == hipSuccess) err = hipEventRecord(lane.events[1], in_stream);
  }
  if (err == hipSuccess && shared) err = hipStreamWaitEvent(lane.stream, lane.events[1], 0);
  if (err == hipSuccess) {
    what = "launching the fused kernel";
    err = lane.fault.Check(FaultPoint::kLaunch);
    if (err == hipSuccess) {
      err = kernels::Conv1dRun(
          *ctx.problem, info,
          reinterpret_cast<const kernels::Conv1dSegment*>(lane.buffer + round.table_offset),
          lane.workspace, lane.workspace_bytes, lane.stream);
    }
  }
  if (err == hipSuccess) err = hipEventRecord(lane.events[2], lane.stream);
  if (err == hipSuccess) {
    absl::MutexLockMaybe lock(shared ? &dev.d2h_mu : nullptr);
    if (shared) err = hipStreamWaitEvent(out_stream, lane.events[2], 0);
    if (err == hipSuccess && n_scatter > 0) {
      what = "scattering small outputs to host memory";
      err = kernels::BatchCopyRun(lane.scatter_table, n_scatter, out_stream);
      d2h_bytes += Total(plan.scatter);
    }
    if (err == hipSuccess) {
      what = "queueing the D2H copy";
      err = lane.fault.Check(FaultPoint::kCopy);
      if (err == hipSuccess) {
        err = MemcpyAsyncMany(d2h, hipMemcpyDeviceToHost, out_stream, options.batch_copies,
                              &d2h_bytes);
      }
    }
    if (err == hipSuccess) err = hipEventRecord(lane.events[3], out_stream);
  }
  if (err == hipSuccess) {
    what = "running the batch on the device";
    err = hipEventSynchronize(lane.events[3]);
  }
  if (err != hipSuccess) return GpuStatus(err, what);
  float ms[3] = {0, 0, 0};
  for (int s = 0; s < 3; ++s) (void)hipEventElapsedTime(&ms[s], lane.events[s], lane.events[s + 1]);
  stats->h2d_seconds += ms[0] * 1e-3;
  stats->compute_seconds += ms[1] * 1e-3;
  stats->d2h_seconds += ms[2] * 1e-3;
  stats->h2d_bytes += h2d_bytes;
  stats->d2h_bytes += d2h_bytes;
  stats->in_place_bytes += plan.in_place_in_bytes + plan.in_place_out_bytes;
  stats->launches += 1;

  // Staged outputs to the requests; weight gradients converted or summed.
  const absl::Time unpack_start = absl::Now();
  for (size_t p = 0; p < round.pieces.size(); ++p) {
    const Piece& pc = round.pieces[p];
    const ConvSegment& seg = *ctx.segments[pc.segment];
    for (Role role : {Role::kDweight, Role::kDbias}) {
      const RoundPlan::Tensor& t = plan.tensors[p][RoleIndex(role)];
      const OutputView& out = seg.output(role);
      if (t.move != Move::kHostReduce || !out.present()) continue;
      const int64_t count = role == Role::kDweight ? key.dim * key.width : key.dim;
      const float* src = reinterpret_cast<const float*>(lane.pinned + t.lane_offset);
      if (ctx.pieces_of[pc.segment] == 1) {
        absl::Status st = StoreOutputFloats(out, key.grad_weight_dtype, src, count);
        if (!st.ok()) return st;
        continue;
      }
      std::vector<float>& acc =
          (*(role == Role::kDweight ? ctx.dweight_sums : ctx.dbias_sums))[pc.segment];
      if (acc.empty()) acc.assign(count, 0.f);
      for (int64_t k = 0; k < count; ++k) acc[k] += src[k];
    }
  }
  jobs.clear();
  for (const LaneCopy& c : plan.unpack) {
    jobs.push_back({const_cast<void*>(c.host), lane.pinned + c.lane_offset, c.bytes});
  }
  ParallelCopy(ctx.pack_pool, jobs);
  stats->staged_bytes += Total(plan.unpack);
  stats->pack_seconds += absl::ToDoubleSeconds(absl::Now() - unpack_start);
  return absl::OkStatus();
}

}  // namespace conv1d::gpu
