#include "server/backends/gpu/batch_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/core/segment_check.h"

namespace conv1d::gpu {
namespace {

int64_t AlignUp(int64_t n) {
  return (n + kSlotAlignBytes - 1) / kSlotAlignBytes * kSlotAlignBytes;
}

// The roles a piece takes a slot for: every role the key uses, weights only
// when they are not on the device already.
RoleSet StagedRoles(const BatchKey& key, bool weights_on_device) {
  RoleSet s = key.roles();
  if (weights_on_device) {
    s = RoleSet{static_cast<uint16_t>(s.bits & ~((1u << RoleIndex(Role::kWeight)) |
                                                 (1u << RoleIndex(Role::kBias))))};
  }
  return s;
}

// Bytes of the row-proportional tensors of one row, each slot counted with
// its worst-case alignment padding, and the fixed per-piece bytes.
struct Footprint {
  int64_t per_row = 0;
  int64_t fixed = 0;
};

Footprint FootprintOf(const BatchKey& key, const ConvSegment& seg,
                      bool weights_on_device) {
  const RoleSet staged = StagedRoles(key, weights_on_device);
  Footprint f;
  int slots = 0;
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    if (!staged.has(r)) continue;
    if (IsPerRow(r)) {
      f.per_row += StagedBytes(key, seg, r, 1);
      ++slots;
    } else {
      f.fixed += AlignUp(StagedBytes(key, seg, r, 1));
    }
  }
  f.fixed += int64_t{slots} * kSlotAlignBytes;
  return f;
}

}  // namespace

DType StagedWeightDType(const BatchKey& key) {
  return key.weight_dtype == DType::kF32 || key.weight_dtype == key.x_dtype
             ? key.weight_dtype
             : DType::kF32;
}

int64_t StagedBytes(const BatchKey& key, const ConvSegment& seg, Role role, int64_t rows) {
  const int64_t elements = RoleElements(key, seg, role, rows);
  switch (DTypeClassOf(role)) {
    case RoleDType::kWeight: return elements * DTypeSize(StagedWeightDType(key));
    case RoleDType::kGradWeight: return elements * 4;
    case RoleDType::kActivation: break;
  }
  return elements * DTypeSize(key.x_dtype);
}

int64_t MinLaneBytesFor(const BatchKey& key, const ConvSegment& seg,
                        int64_t table_entry_bytes) {
  const Footprint f = FootprintOf(key, seg, /*weights_on_device=*/false);
  return AlignUp(table_entry_bytes) + f.fixed + f.per_row;
}

absl::StatusOr<std::vector<Round>> PlanRounds(
    const BatchKey& key, absl::Span<ConvSegment* const> segments,
    absl::Span<const bool> weights_on_device, const LayoutOptions& options) {
  std::vector<Round> rounds;
  Round current;
  int64_t used = 0;     // bytes of inputs+outputs in `current`
  int64_t ws_used = 0;  // estimated workspace of `current`
  auto table_bytes = [&](size_t pieces) {
    return AlignUp(static_cast<int64_t>(pieces) * options.table_entry_bytes);
  };
  auto close = [&] {
    if (!current.pieces.empty()) rounds.push_back(std::move(current));
    current = Round();
    used = 0;
    ws_used = 0;
  };

  for (size_t i = 0; i < segments.size(); ++i) {
    const ConvSegment& seg = *segments[i];
    const Footprint f = FootprintOf(key, seg, weights_on_device[i]);
    const int64_t ws_per_row = options.piece_workspace(seg, 1);
    int64_t b = 0;
    while (b < seg.batch) {
      const int64_t rows_left = seg.batch - b;
      const int64_t avail = options.capacity_bytes - used -
                            table_bytes(current.pieces.size() + 1) - f.fixed;
      int64_t fit = avail < f.per_row ? 0 : avail / std::max<int64_t>(f.per_row, 1);
      if (ws_per_row > 0) {
        fit = std::min(fit, (options.workspace_bytes - ws_used) / ws_per_row);
      }
      if (fit <= 0 || (fit < rows_left && !current.pieces.empty())) {
        if (current.pieces.empty()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "one sequence of request ", i, " of the batch needs ",
              f.per_row + f.fixed, " bytes of staging and ", ws_per_row,
              " bytes of kernel workspace, more than a lane has "
              "(lane_buffer_bytes=", options.capacity_bytes,
              ", workspace_bytes=", options.workspace_bytes, ")"));
        }
        close();
        continue;
      }
      const int64_t take = std::min(fit, rows_left);
      current.pieces.push_back(Piece{static_cast<int32_t>(i), b, take});
      used += f.fixed + f.per_row * take;
      ws_used += options.piece_workspace(seg, take);
      b += take;
      if (b < seg.batch) close();  // the rest of this request goes on
    }
  }
  close();

  // Assign offsets: table, then every input, then every output.
  for (Round& r : rounds) {
    r.table_offset = 0;
    r.table_bytes = table_bytes(r.pieces.size());
    int64_t at = r.table_bytes;
    r.slots.resize(r.pieces.size());
    auto place = [&](bool inputs) {
      for (size_t p = 0; p < r.pieces.size(); ++p) {
        const Piece& pc = r.pieces[p];
        const ConvSegment& seg = *segments[pc.segment];
        const RoleSet staged = StagedRoles(key, weights_on_device[pc.segment]);
        for (int i = 0; i < kNumRoles; ++i) {
          const Role role = RoleAt(i);
          if (!staged.has(role) || IsInput(role) != inputs) continue;
          r.slots[p][role] = at;
          at += AlignUp(StagedBytes(key, seg, role, pc.b_count));
        }
        if (inputs) r.workspace_bytes += options.piece_workspace(seg, pc.b_count);
      }
    };
    place(/*inputs=*/true);
    r.input_end = at;
    r.output_begin = at;
    place(/*inputs=*/false);
    r.output_end = at;
    if (r.output_end > options.capacity_bytes) {
      return absl::InternalError(absl::StrCat(
          "batch layout overflow: ", r.output_end, " > lane_buffer_bytes=",
          options.capacity_bytes));
    }
  }
  return rounds;
}

}  // namespace conv1d::gpu
