// GpuBackend::RunBatch: resolve weights, cut the batch into rounds
// (batch_layout.h), plan each round's transfers (transfer_plan.h) and run
// it (lane_executor.h); on failure, settle the lane and mark the device
// failed when the error is sticky.
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_backend_internal.h"
#include "server/backends/gpu/lane_executor.h"
#include "server/backends/gpu/transfer_plan.h"

namespace conv1d {
namespace {

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

}  // namespace

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
  if (absl::Status st = gpu::GpuStatus(hipSetDevice(dev.index), "hipSetDevice"); !st.ok()) {
    return st;
  }

  // Registered weights come from the device cache; inline ones (and ones
  // that need a dtype conversion) are moved with the batch.
  const bool convert_weights = gpu::StagedWeightDType(key) != key.weight_dtype;
  absl::InlinedVector<bool, 64> resident(n, false);
  absl::InlinedVector<gpu::DeviceWeights, 64> cached(n);
  for (int64_t i = 0; i < n; ++i) {
    const ConvSegment& seg = *segments[i];
    if (seg.weight.cache_id == 0 || convert_weights) continue;
    absl::StatusOr<gpu::DeviceWeights> w = dev.weights->Get(seg.weight, seg.bias);
    if (w.ok()) {
      resident[i] = true;
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
      gpu::PlanRounds(key, segments, resident, layout_options);
  if (!rounds.ok()) return rounds.status();

  // dweight/dbias of requests cut over several rounds are summed here.
  absl::InlinedVector<int32_t, 64> pieces_of(n, 0);
  for (const gpu::Round& r : *rounds) {
    for (const gpu::Piece& p : r.pieces) ++pieces_of[p.segment];
  }
  std::vector<std::vector<float>> dw_sums(n), db_sums(n);

  gpu::MovePolicy policy;
  policy.direct_copy_bytes = options_.direct_copy_bytes;
  policy.copy_kernels = gather_small_host_tensors_;
  policy.in_place = gather_small_host_tensors_ && options_.in_place_host_tensors;
  policy.device = dev.index;
  const gpu::CopyKernelLimits copy_limits{kernels::kBatchCopyChunkBytes, kCopyTableEntries};
  gpu::RoundContext ctx;
  ctx.key = &key;
  ctx.segments = segments;
  ctx.problem = &problem;
  ctx.resident = cached;
  ctx.pieces_of = pieces_of;
  ctx.dweight_sums = &dw_sums;
  ctx.dbias_sums = &db_sums;
  ctx.pack_pool = pack_pool_.get();
  ctx.options = &options_;
  std::vector<gpu::PieceFacts> facts;
  for (const gpu::Round& round : *rounds) {
    facts.assign(round.pieces.size(), gpu::PieceFacts{});
    for (size_t p = 0; p < round.pieces.size(); ++p) {
      const ConvSegment& seg = *segments[round.pieces[p].segment];
      facts[p].streams_in_place =
          kernels::Conv1dStreamsInPlace(problem, seg.seqlen, seg.state_len);
      facts[p].weights_resident = resident[round.pieces[p].segment];
    }
    absl::StatusOr<gpu::RoundPlan> plan =
        gpu::PlanTransfers(key, segments, round, facts, policy, copy_limits);
    if (!plan.ok()) return plan.status();
    ctx.round = &round;
    if (absl::Status st = gpu::ExecuteRound(lane, dev, *plan, ctx, stats); !st.ok()) return st;
  }
  for (int64_t i = 0; i < n; ++i) {
    const ConvSegment& seg = *segments[i];
    if (!dw_sums[i].empty()) {
      absl::Status st = gpu::StoreOutputFloats(seg.dweight, key.grad_weight_dtype,
                                               dw_sums[i].data(), dw_sums[i].size());
      if (!st.ok()) return st;
    }
    if (!db_sums[i].empty()) {
      absl::Status st = gpu::StoreOutputFloats(seg.dbias, key.grad_weight_dtype,
                                               db_sums[i].data(), db_sums[i].size());
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace conv1d
