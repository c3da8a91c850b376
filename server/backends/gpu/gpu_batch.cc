// GpuBackend::RunBatch: resolve weights, plan rounds, and for each round
// pack -> H2D (DMAs, then the gather kernel) -> fused kernel -> D2H (the
// scatter kernel, then DMAs) -> unpack on the lane's stream.
#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/backends/cpu/thread_pool.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_backend_internal.h"
#include "server/backends/gpu/host_pool.h"

namespace conv1d {
namespace {

constexpr int64_t kCopyChunkBytes = int64_t{1} << 20;
constexpr int64_t kInlineCopyBytes = int64_t{256} << 10;

kernels::Conv1dProblem ProblemOf(const BatchKey& key) {
  kernels::Conv1dProblem p;
  p.op = static_cast<kernels::KernelOp>(key.op);
  p.x_type = static_cast<kernels::ScalarType>(key.x_dtype);
  p.weight_type = static_cast<kernels::ScalarType>(gpu::StagedWeightDType(key));
  // Gradients of the weights come back in fp32 and are converted on the
  // host, so that requests cut into several rounds sum them without loss.
  p.grad_weight_type = kernels::ScalarType::kF32;
  p.dim = key.dim;
  p.width = key.width;
  p.activation = static_cast<kernels::KernelActivation>(key.activation);
  p.layout = static_cast<kernels::KernelLayout>(key.layout);
  p.has_bias = key.has_bias;
  p.has_initial_states = key.has_initial_states;
  p.return_final_states = key.return_final_states;
  p.has_dfinal_states = key.has_dfinal_states;
  p.return_dinitial_states = key.return_dinitial_states;
  return p;
}

// Writes n fp32 values as `dtype` (plain copy for fp32).
void StoreFloats(void* dst, DType dtype, const float* src, int64_t n) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
}

// A byte range of the lane buffer moved by one staged copy.
struct Range {
  int64_t offset;
  int64_t bytes;
};

// Sorts `ranges` and merges those separated by no more than slot padding,
// so that consecutive staged slots move in one copy.
void MergeRanges(std::vector<Range>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.offset < b.offset; });
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (!merged.empty()) {
      Range& last = merged.back();
      const int64_t end = last.offset + last.bytes;
      if (r.offset >= end && r.offset - end < gpu::kSlotAlignBytes) {
        last.bytes = r.offset + r.bytes - last.offset;
        continue;
      }
    }
    merged.push_back(r);
  }
  ranges.swap(merged);
}

// Queues the jobs' async copies on `stream` (with `batched`, in one batch
// call where the runtime has one); adds their bytes to *bytes.
hipError_t QueueCopies(const std::vector<CopyJob>& jobs, hipMemcpyKind kind,
                       hipStream_t stream, int64_t* bytes, bool batched) {
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
  if (batched && jobs.size() > 1) {
    thread_local std::vector<void*> dsts;
    thread_local std::vector<const void*> srcs;
    thread_local std::vector<size_t> sizes;
    dsts.clear();
    srcs.clear();
    sizes.clear();
    int64_t total = 0;
    for (const CopyJob& j : jobs) {
      dsts.push_back(j.dst);
      srcs.push_back(j.src);
      sizes.push_back(static_cast<size_t>(j.bytes));
      total += j.bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t first = 0;
    const hipError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                                jobs.size(), &attr, &first, 1, stream);
    if (err == hipSuccess) *bytes += total;
    return err;
  }
#endif
  (void)batched;
  for (const CopyJob& j : jobs) {
    const hipError_t err = hipMemcpyAsync(j.dst, j.src, j.bytes, kind, stream);
    if (err != hipSuccess) return err;
    *bytes += j.bytes;
  }
  return hipSuccess;
}

int64_t JobBytes(const std::vector<CopyJob>& jobs) {
  int64_t bytes = 0;
  for (const CopyJob& j : jobs) bytes += j.bytes;
  return bytes;
}

int64_t ChunkBytes(const kernels::BatchCopyChunk* table, int32_t n) {
  int64_t bytes = 0;
  for (int32_t i = 0; i < n; ++i) bytes += table[i].bytes;
  return bytes;
}

}  // namespace

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

absl::Status GpuBackend::RunBatch(int lane_index, const BatchKey& key,
                                  absl::Span<ConvSegment* const> segments,
                                  BatchStats* stats) {
  Lane& lane = *lanes_[lane_index];
  Device& dev = *lane.device;
  if (dev.failed.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&dev.mu);
    return dev.error;
  }
  absl::Status st = RunRounds(lane, key, segments, stats);
  if (!st.ok()) {
    const hipError_t err = hipGetLastError();
    hipError_t sync = hipStreamSynchronize(lane.stream);
    // Copies this lane queued on the device's shared streams must be done
    // before its buffers are used again.
    for (hipStream_t shared : {dev.h2d_stream, dev.d2h_stream}) {
      if (shared != nullptr && sync == hipSuccess) sync = hipStreamSynchronize(shared);
    }
    if (gpu::IsStickyError(err) || gpu::IsStickyError(sync)) {
      MarkDeviceFailed(dev, st);
    }
  }
  return st;
}

absl::Status GpuBackend::RunRounds(Lane& lane, const BatchKey& key,
                                   absl::Span<ConvSegment* const> segments,
                                   BatchStats* stats) {
  Device& dev = *lane.device;
  const int64_t n = static_cast<int64_t>(segments.size());
  if (absl::Status st = gpu::GpuStatus(hipSetDevice(dev.index), "hipSetDevice");
      !st.ok()) {
    return st;
  }

  // Registered weights come from the device cache; inline ones (and ones
  // that need a dtype conversion) are staged.
  const bool convert_weights = gpu::StagedWeightDType(key) != key.weight_dtype;
  absl::InlinedVector<bool, 64> on_device(n, false);
  absl::InlinedVector<gpu::DeviceWeights, 64> cached(n);
  for (int64_t i = 0; i < n; ++i) {
    const ConvSegment& seg = *segments[i];
    if (seg.weight.cache_id == 0 || convert_weights) continue;
    absl::StatusOr<gpu::DeviceWeights> w = dev.weights->Get(seg.weight, seg.bias);
    if (w.ok()) {
      on_device[i] = true;
      cached[i] = *w;
    } else if (!absl::IsNotFound(w.status())) {
      return w.status();
    }
  }
  if (options_.observer != nullptr) {
    options_.observer->OnPoolBytes(
        "device_in_use", dev.index,
        dev.device_pool_bytes - dev.weights->region_bytes() + dev.weights->bytes_in_use());
  }

  const kernels::Conv1dProblem problem = ProblemOf(key);
  auto piece_workspace = [&](const ConvSegment& seg, int64_t rows) -> int64_t {
    if (key.op != Op::kBackward) return 0;
    kernels::Conv1dSegmentSize one;
    one.batch = rows;
    one.seqlen = seg.seqlen;
    one.state_len = seg.state_len;
    const int64_t bytes = kernels::Conv1dWorkspaceBytes(problem, &one, 1);
    return bytes > 0 ? bytes : 0;
  };
  gpu::LayoutOptions layout_options{lane_buffer_bytes_, lane.workspace_bytes,
                                    sizeof(kernels::Conv1dSegment), piece_workspace};
  absl::StatusOr<std::vector<gpu::Round>> rounds =
      gpu::PlanRounds(key, segments, on_device, layout_options);
  if (!rounds.ok()) return rounds.status();

  // dweight/dbias of requests cut over several rounds are summed here.
  absl::InlinedVector<int32_t, 64> pieces_of(n, 0);
  for (const gpu::Round& r : *rounds) {
    for (const gpu::Piece& p : r.pieces) ++pieces_of[p.segment];
  }
  std::vector<std::vector<float>> dw_acc(n), db_acc(n);

  // Where each tensor goes: host-pool tensors of at least direct_copy_bytes
  // by their own DMA straight between the request and the device, smaller
  // host-pool ones by the gather/scatter copy kernels, the rest packed
  // through the lane's staging.
  auto in_pool = [&](const void* p, int64_t bytes) {
    return host_pool_ != nullptr && host_pool_->Contains(p, bytes);
  };
  auto direct = [&](const void* p, int64_t bytes) {
    return bytes >= options_.direct_copy_bytes && in_pool(p, bytes);
  };
  auto gathered = [&](const void* p, int64_t bytes) {
    return gather_small_host_tensors_ && in_pool(p, bytes);
  };
  // Segments whose activations and states the kernel moves in whole-line
  // passes (short forward rows and one-token updates: decode steps) keep
  // their small, 16-byte aligned host-pool tensors where they are: the
  // fused kernel reads and writes them over the bus, with no copy at all.
  const bool in_place_ok = gather_small_host_tensors_ && options_.in_place_host_tensors;
  auto in_place = [&](const void* p, int64_t bytes) {
    return bytes < options_.direct_copy_bytes && reinterpret_cast<uintptr_t>(p) % 16 == 0 &&
           in_pool(p, bytes);
  };
  std::vector<CopyJob> pack, unpack, direct_in, direct_out, h2d, d2h;
  std::vector<Range> h2d_runs, d2h_runs;
  for (const gpu::Round& round : *rounds) {
    const absl::Time pack_start = absl::Now();
    lane.table.assign(round.pieces.size(), kernels::Conv1dSegment{});
    pack.clear();
    unpack.clear();
    direct_in.clear();
    direct_out.clear();
    h2d_runs.assign(1, Range{round.table_offset, round.table_bytes});
    d2h_runs.clear();
    int32_t n_gather = 0, n_scatter = 0;
    // Bytes the kernel reads from and writes to the host pool in place.
    int64_t in_place_in = 0, in_place_out = 0;
    auto dev_ptr = [&](int64_t off) -> char* { return off < 0 ? nullptr : lane.buffer + off; };
    for (size_t p = 0; p < round.pieces.size(); ++p) {
      const gpu::Piece& pc = round.pieces[p];
      const gpu::PieceSlots& sl = round.slots[p];
      const ConvSegment& seg = *segments[pc.segment];
      const gpu::PieceBytes row = gpu::BytesOfPiece(key, seg, 1);
      const gpu::PieceBytes all = gpu::BytesOfPiece(key, seg, pc.b_count);
      const bool piece_in_place =
          in_place_ok && kernels::Conv1dStreamsInPlace(problem, seg.seqlen, seg.state_len);
      // Each returns the address the kernel uses for the tensor: its slot in
      // the lane buffer, or the request's own memory when used in place.
      auto stage = [&](int64_t slot, const TensorView& v, int64_t row_bytes,
                       int64_t bytes, bool may_use_in_place) -> const void* {
        if (slot < 0) return nullptr;
        const char* src = static_cast<const char*>(v.data) + pc.b_begin * row_bytes;
        if (may_use_in_place && piece_in_place && in_place(src, bytes)) {
          in_place_in += bytes;
          return src;
        }
        if (direct(src, bytes)) {
          direct_in.push_back({lane.buffer + slot, src, bytes});
        } else if (!gathered(src, bytes) ||
                   !kernels::BatchCopyAppend(lane.gather_table, kCopyTableEntries,
                                             &n_gather, src, lane.buffer + slot, bytes)) {
          pack.push_back({lane.pinned + slot, src, bytes});
          h2d_runs.push_back({slot, bytes});
        }
        return lane.buffer + slot;
      };
      // Outputs: the same choice, made now so that the copies can be queued
      // behind the kernel; staged ones are unpacked after the round.
      auto stage_out = [&](int64_t slot, const OutputView& v, int64_t row_bytes,
                           int64_t bytes) -> void* {
        if (slot < 0) return nullptr;
        if (!v.present()) return lane.buffer + slot;
        char* dst = static_cast<char*>(v.data) + pc.b_begin * row_bytes;
        if (piece_in_place && in_place(dst, bytes)) {
          in_place_out += bytes;
          return dst;
        }
        if (direct(dst, bytes)) {
          direct_out.push_back({dst, lane.buffer + slot, bytes});
        } else if (!gathered(dst, bytes) ||
                   !kernels::BatchCopyAppend(lane.scatter_table, kCopyTableEntries,
                                             &n_scatter, lane.buffer + slot, dst, bytes)) {
          d2h_runs.push_back({slot, bytes});
          unpack.push_back({dst, lane.pinned + slot, bytes});
        }
        return lane.buffer + slot;
      };
      kernels::Conv1dSegment& t = lane.table[p];
      t.set(Role::kY, stage_out(sl.y, seg.y, row.x, all.x));
      t.set(Role::kDx, stage_out(sl.dx, seg.dx, row.x, all.x));
      t.set(Role::kFinalStates, stage_out(sl.final_states, seg.final_states, row.state, all.state));
      t.set(Role::kDinitialStates,
            stage_out(sl.dinitial_states, seg.dinitial_states, row.state, all.state));
      t.set(Role::kConvStateOut,
            stage_out(sl.conv_state_out, seg.conv_state_out, row.conv_state, all.conv_state));
      if (sl.dweight >= 0) d2h_runs.push_back({sl.dweight, all.dweight});
      if (sl.dbias >= 0) d2h_runs.push_back({sl.dbias, all.dbias});
      t.set(Role::kX, stage(sl.x, seg.x, row.x, all.x, true));
      t.set(Role::kDout, stage(sl.dout, seg.dout, row.x, all.x, true));
      t.set(Role::kInitialStates, stage(sl.initial_states, seg.initial_states, row.state, all.state, true));
      t.set(Role::kDfinalStates, stage(sl.dfinal_states, seg.dfinal_states, row.state, all.state, true));
      t.set(Role::kConvState, stage(sl.conv_state, seg.conv_state, row.conv_state, all.conv_state, true));
      if (convert_weights) {  // small: [D, W] and [D], staged as fp32
        if (sl.weight >= 0) {
          float* w = reinterpret_cast<float*>(lane.pinned + sl.weight);
          for (int64_t k = 0; k < key.dim * key.width; ++k) {
            w[k] = LoadAsFloat(seg.weight.data, key.weight_dtype, k);
          }
          h2d_runs.push_back({sl.weight, key.dim * key.width * 4});
        }
        if (sl.bias >= 0) {
          float* b = reinterpret_cast<float*>(lane.pinned + sl.bias);
          for (int64_t k = 0; k < key.dim; ++k) {
            b[k] = LoadAsFloat(seg.bias.data, key.weight_dtype, k);
          }
          h2d_runs.push_back({sl.bias, key.dim * 4});
        }
      } else {
        // Weights are read by every tile of a row: never in place.
        stage(sl.weight, seg.weight, 0, all.weight, false);
        stage(sl.bias, seg.bias, 0, all.bias, false);
      }
      t.set(Role::kWeight, on_device[pc.segment] ? cached[pc.segment].weight : dev_ptr(sl.weight));
      t.set(Role::kBias, !key.has_bias ? nullptr
                         : on_device[pc.segment] ? cached[pc.segment].bias
                                                 : dev_ptr(sl.bias));
      t.set(Role::kDweight, dev_ptr(sl.dweight));
      t.set(Role::kDbias, dev_ptr(sl.dbias));
      t.batch = pc.b_count;
      t.seqlen = seg.seqlen;
      t.state_len = seg.state_len;
    }
    kernels::Conv1dPlanInfo plan;
    hipError_t err = kernels::Conv1dPlan(problem, lane.table.data(),
                                         static_cast<int32_t>(lane.table.size()), &plan);
    if (err != hipSuccess) return gpu::GpuStatus(err, "planning the fused launch");
    if (plan.workspace_bytes > lane.workspace_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the fused launch needs ", plan.workspace_bytes,
          " bytes of kernel workspace, more than workspace_bytes=",
          lane.workspace_bytes));
    }
    std::memcpy(lane.pinned + round.table_offset, lane.table.data(),
                lane.table.size() * sizeof(kernels::Conv1dSegment));
    ParallelCopy(pack_pool_.get(), pack);
    stats->staged_bytes += JobBytes(pack);
    stats->pack_seconds += absl::ToDoubleSeconds(absl::Now() - pack_start);

    // Staged runs first, then the direct DMAs, in each direction.
    MergeRanges(h2d_runs);
    MergeRanges(d2h_runs);
    h2d.clear();
    d2h.clear();
    for (const Range& r : h2d_runs) {
      h2d.push_back({lane.buffer + r.offset, lane.pinned + r.offset, r.bytes});
    }
    for (const Range& r : d2h_runs) {
      d2h.push_back({lane.pinned + r.offset, lane.buffer + r.offset, r.bytes});
    }
    h2d.insert(h2d.end(), direct_in.begin(), direct_in.end());
    d2h.insert(d2h.end(), direct_out.begin(), direct_out.end());
    // In: the copies and the gather kernel; then the fused kernel on the
    // lane's stream; out: the scatter kernel and the copies. With shared
    // copy streams, events order the three streams.
    const int64_t gather_bytes = ChunkBytes(lane.gather_table, n_gather);
    const int64_t scatter_bytes = ChunkBytes(lane.scatter_table, n_scatter);
    // Only DMAs decide: the copy engines move one transfer per direction
    // best, so long ones are ordered on the shared streams, while the
    // gather/scatter kernels of different lanes read and write the bus at
    // the same time better than one after another.
    const bool shared = dev.h2d_stream != nullptr &&
                        JobBytes(h2d) + JobBytes(d2h) >= options_.shared_copy_min_bytes;
    hipStream_t in_stream = shared ? dev.h2d_stream : lane.stream;
    hipStream_t out_stream = shared ? dev.d2h_stream : lane.stream;
    int64_t h2d_bytes = 0, d2h_bytes = 0;
    const char* what = "queueing the H2D copy";
    {
      absl::MutexLockMaybe lock(shared ? &dev.h2d_mu : nullptr);
      err = hipEventRecord(lane.events[0], in_stream);
      if (err == hipSuccess) err = QueueCopies(h2d, hipMemcpyHostToDevice, in_stream, &h2d_bytes,
                                             options_.batch_copies);
      if (err == hipSuccess && n_gather > 0) {
        what = "gathering small host-pool tensors";
        err = kernels::BatchCopyRun(lane.gather_table, n_gather, in_stream);
        h2d_bytes += gather_bytes;
      }
      if (err == hipSuccess) err = hipEventRecord(lane.events[1], in_stream);
    }
    if (err == hipSuccess && shared) err = hipStreamWaitEvent(lane.stream, lane.events[1], 0);
    if (err == hipSuccess) {
      what = "launching the fused kernel";
      err = kernels::Conv1dRun(
          problem, plan,
          reinterpret_cast<const kernels::Conv1dSegment*>(lane.buffer + round.table_offset),
          lane.workspace, lane.workspace_bytes, lane.stream);
    }
    if (err == hipSuccess) err = hipEventRecord(lane.events[2], lane.stream);
    if (err == hipSuccess) {
      absl::MutexLockMaybe lock(shared ? &dev.d2h_mu : nullptr);
      if (shared) err = hipStreamWaitEvent(out_stream, lane.events[2], 0);
      if (err == hipSuccess && n_scatter > 0) {
        what = "scattering small outputs to the host pool";
        err = kernels::BatchCopyRun(lane.scatter_table, n_scatter, out_stream);
        d2h_bytes += scatter_bytes;
      }
      if (err == hipSuccess) {
        what = "queueing the D2H copy";
        err = QueueCopies(d2h, hipMemcpyDeviceToHost, out_stream, &d2h_bytes,
                          options_.batch_copies);
      }
      if (err == hipSuccess) err = hipEventRecord(lane.events[3], out_stream);
    }
    if (err == hipSuccess) {
      what = "running the batch on the device";
      err = hipEventSynchronize(lane.events[3]);
    }
    if (err != hipSuccess) return gpu::GpuStatus(err, what);
    float ms[3] = {0, 0, 0};
    for (int s = 0; s < 3; ++s) {
      (void)hipEventElapsedTime(&ms[s], lane.events[s], lane.events[s + 1]);
    }
    stats->h2d_seconds += ms[0] * 1e-3;
    stats->compute_seconds += ms[1] * 1e-3;
    stats->d2h_seconds += ms[2] * 1e-3;
    stats->h2d_bytes += h2d_bytes;
    stats->d2h_bytes += d2h_bytes;
    stats->in_place_bytes += in_place_in + in_place_out;
    stats->launches += 1;

    // Unpack: staged outputs to the requests, weight gradients converted or
    // summed.
    const absl::Time unpack_start = absl::Now();
    for (size_t p = 0; p < round.pieces.size(); ++p) {
      const gpu::Piece& pc = round.pieces[p];
      const gpu::PieceSlots& sl = round.slots[p];
      const ConvSegment& seg = *segments[pc.segment];
      auto grads = [&](int64_t slot, const OutputView& out, std::vector<float>& acc,
                       int64_t count) {
        if (slot < 0 || !out.present()) return;
        const float* src = reinterpret_cast<const float*>(lane.pinned + slot);
        if (pieces_of[pc.segment] == 1) {
          StoreFloats(out.data, key.grad_weight_dtype, src, count);
          return;
        }
        if (acc.empty()) acc.assign(count, 0.f);
        for (int64_t k = 0; k < count; ++k) acc[k] += src[k];
      };
      grads(sl.dweight, seg.dweight, dw_acc[pc.segment], key.dim * key.width);
      grads(sl.dbias, seg.dbias, db_acc[pc.segment], key.dim);
    }
    ParallelCopy(pack_pool_.get(), unpack);
    stats->staged_bytes += JobBytes(unpack);
    stats->pack_seconds += absl::ToDoubleSeconds(absl::Now() - unpack_start);
  }
  for (int64_t i = 0; i < n; ++i) {
    const ConvSegment& seg = *segments[i];
    if (!dw_acc[i].empty()) {
      StoreFloats(seg.dweight.data, key.grad_weight_dtype, dw_acc[i].data(), dw_acc[i].size());
    }
    if (!db_acc[i].empty()) {
      StoreFloats(seg.dbias.data, key.grad_weight_dtype, db_acc[i].data(), db_acc[i].size());
    }
  }
  return absl::OkStatus();
}

}  // namespace conv1d
