#include "server/backends/gpu/transfer_plan.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "server/core/segment_check.h"

namespace conv1d::gpu {
namespace {

// Host or device memory of the request: stage, DMA, copy kernel or in place.
Move MoveOfRequestMemory(const Placement& where, const void* address, int64_t bytes,
                         bool may_stay, const MovePolicy& policy) {
  if (where.on_device()) return Move::kInPlace;
  if (!where.page_locked()) return Move::kStage;
  const bool aligned = reinterpret_cast<uintptr_t>(address) % 16 == 0;
  if (may_stay && policy.in_place && bytes < policy.direct_copy_bytes && aligned) {
    return Move::kInPlace;
  }
  if (bytes >= policy.direct_copy_bytes) return Move::kDma;
  return policy.copy_kernels ? Move::kCopyKernel : Move::kStage;
}

// Sorts runs by offset and merges those separated by no more than slot
// padding, so that consecutive staged slots move in one DMA.
void MergeRuns(std::vector<LaneCopy>* runs) {
  std::sort(runs->begin(), runs->end(), [](const LaneCopy& a, const LaneCopy& b) {
    return a.lane_offset < b.lane_offset;
  });
  std::vector<LaneCopy> merged;
  for (const LaneCopy& r : *runs) {
    if (!merged.empty()) {
      LaneCopy& last = merged.back();
      const int64_t end = last.lane_offset + last.bytes;
      if (r.lane_offset >= end && r.lane_offset - end < kSlotAlignBytes) {
        last.bytes = r.lane_offset + r.bytes - last.lane_offset;
        continue;
      }
    }
    merged.push_back(r);
  }
  runs->swap(merged);
}

int64_t ChunksOf(int64_t bytes, const CopyKernelLimits& limits) {
  return bytes <= 0 ? 0 : (bytes + limits.chunk_bytes - 1) / limits.chunk_bytes;
}

}  // namespace

const char* MoveName(Move move) {
  switch (move) {
    case Move::kNone: return "none";
    case Move::kDiscard: return "discard";
    case Move::kStage: return "stage";
    case Move::kDma: return "dma";
    case Move::kCopyKernel: return "copy_kernel";
    case Move::kInPlace: return "in_place";
    case Move::kResident: return "resident";
    case Move::kConvert: return "convert";
    case Move::kHostReduce: return "host_reduce";
  }
  return "?";
}

Move ChooseMove(Role role, bool used, bool present, const Placement& where,
                const void* address, int64_t bytes, bool convert_weights,
                const PieceFacts& piece, const MovePolicy& policy) {
  if (!used) return Move::kNone;
  if (role == Role::kDweight || role == Role::kDbias) return Move::kHostReduce;
  if (!present) return IsOutput(role) ? Move::kDiscard : Move::kNone;
  if (role == Role::kWeight || role == Role::kBias) {
    if (piece.weights_resident) return Move::kResident;
    // The kernels take weights in x's dtype or fp32 only, wherever they are
    // (device weights are brought back to be converted: D * W elements).
    if (convert_weights) return Move::kConvert;
    // Every tile of a row reads the weights: host weights never stay put.
    return MoveOfRequestMemory(where, address, bytes, /*may_stay=*/false, policy);
  }
  return MoveOfRequestMemory(where, address, bytes, piece.streams_in_place, policy);
}

absl::StatusOr<RoundPlan> PlanTransfers(const BatchKey& key,
                                        absl::Span<ConvSegment* const> segments,
                                        const Round& round,
                                        absl::Span<const PieceFacts> facts,
                                        const MovePolicy& policy,
                                        const CopyKernelLimits& copy_limits) {
  RoundPlan plan;
  plan.tensors.resize(round.pieces.size());
  plan.h2d_runs.push_back({nullptr, round.table_offset, round.table_bytes});
  const RoleSet used = key.roles();
  const bool convert_weights = StagedWeightDType(key) != key.weight_dtype;
  for (size_t p = 0; p < round.pieces.size(); ++p) {
    const Piece& pc = round.pieces[p];
    const ConvSegment& seg = *segments[pc.segment];
    for (int i = 0; i < kNumRoles; ++i) {
      const Role role = RoleAt(i);
      RoundPlan::Tensor& t = plan.tensors[p][i];
      const bool per_row = IsPerRow(role);
      const int64_t first_row_bytes = per_row ? RoleBytes(key, seg, role, 1) * pc.b_begin : 0;
      const int64_t bytes = RoleBytes(key, seg, role, per_row ? pc.b_count : 1);
      const int64_t staged = StagedBytes(key, seg, role, per_row ? pc.b_count : 1);
      const void* data = seg.data(role);
      const void* address =
          data == nullptr ? nullptr : static_cast<const char*>(data) + first_row_bytes;
      const Placement& where = seg.where(role);
      Move move = ChooseMove(role, used.has(role), data != nullptr, where, address, bytes,
                             convert_weights, facts[p], policy);
      if (move == Move::kInPlace && where.on_device() && where.device != policy.device) {
        return absl::FailedPreconditionError(absl::StrCat(
            RoleName(role), " lives in memory of device ", where.device,
            ", but this lane computes on device ", policy.device));
      }
      const int64_t slot = round.slots[p][role];
      const bool input = IsInput(role);
      if (move == Move::kCopyKernel) {
        int64_t& chunks = input ? plan.gather_chunks : plan.scatter_chunks;
        const int64_t need = ChunksOf(bytes, copy_limits);
        if (chunks + need > copy_limits.table_entries) {
          move = Move::kStage;
        } else {
          chunks += need;
        }
      }
      if (move != Move::kNone && move != Move::kResident && move != Move::kInPlace &&
          slot < 0) {
        return absl::InternalError(absl::StrCat("no lane slot for ", RoleName(role), " (",
                                                MoveName(move), ")"));
      }
      t.move = move;
      t.lane_offset = slot;
      const LaneCopy copy{address, slot, bytes};
      switch (move) {
        case Move::kNone:
        case Move::kResident:
          t.lane_offset = -1;
          break;
        case Move::kDiscard:
          break;
        case Move::kStage:
          if (input) {
            plan.pack.push_back(copy);
            plan.h2d_runs.push_back({nullptr, slot, bytes});
          } else {
            plan.unpack.push_back(copy);
            plan.d2h_runs.push_back({nullptr, slot, bytes});
          }
          break;
        case Move::kDma:
          (input ? plan.dma_in : plan.dma_out).push_back(copy);
          break;
        case Move::kCopyKernel:
          (input ? plan.gather : plan.scatter).push_back(copy);
          break;
        case Move::kInPlace:
          t.lane_offset = -1;
          t.external = address;
          (input ? plan.in_place_in_bytes : plan.in_place_out_bytes) += bytes;
          break;
        case Move::kConvert:
          plan.h2d_runs.push_back({nullptr, slot, staged});
          break;
        case Move::kHostReduce:
          plan.d2h_runs.push_back({nullptr, slot, staged});
          break;
      }
    }
  }
  MergeRuns(&plan.h2d_runs);
  MergeRuns(&plan.d2h_runs);
  return plan;
}

}  // namespace conv1d::gpu
