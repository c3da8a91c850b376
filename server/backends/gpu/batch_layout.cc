#include "server/backends/gpu/batch_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace conv1d::gpu {
namespace {

int64_t AlignUp(int64_t n) {
  return (n + kSlotAlignBytes - 1) / kSlotAlignBytes * kSlotAlignBytes;
}

// Which tensors a piece stages, per the op and the key.
struct Staged {
  bool x = true, dout = false, initial_states = false, dfinal_states = false,
       conv_state = false;
  bool y = false, final_states = false, dx = false, dweight = false,
       dbias = false, dinitial_states = false, conv_state_out = false;
};

Staged StagedFor(const BatchKey& key) {
  Staged s;
  switch (key.op) {
    case Op::kForward:
      s.initial_states = key.has_initial_states;
      s.y = true;
      s.final_states = key.return_final_states;
      break;
    case Op::kBackward:
      s.dout = true;
      s.initial_states = key.has_initial_states;
      s.dfinal_states = key.has_dfinal_states;
      s.dx = true;
      s.dweight = true;
      s.dbias = key.has_bias;
      s.dinitial_states = key.return_dinitial_states;
      break;
    case Op::kUpdate:
      s.conv_state = true;
      s.y = true;
      s.conv_state_out = true;
      break;
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
  const Staged s = StagedFor(key);
  const PieceBytes one = BytesOfPiece(key, seg, 1);
  Footprint f;
  int slots = 0;
  auto row = [&](bool on, int64_t bytes) {
    if (!on) return;
    f.per_row += bytes;
    ++slots;
  };
  row(s.x, one.x);
  row(s.dout, one.x);
  row(s.y, one.x);
  row(s.dx, one.x);
  row(s.initial_states, one.state);
  row(s.dfinal_states, one.state);
  row(s.final_states, one.state);
  row(s.dinitial_states, one.state);
  row(s.conv_state, one.conv_state);
  row(s.conv_state_out, one.conv_state);
  auto fixed = [&](bool on, int64_t bytes) {
    if (!on) return;
    f.fixed += AlignUp(bytes);
  };
  fixed(!weights_on_device, one.weight);
  fixed(!weights_on_device && key.has_bias, one.bias);
  fixed(s.dweight, one.dweight);
  fixed(s.dbias, one.dbias);
  f.fixed += int64_t{slots} * kSlotAlignBytes;
  return f;
}

}  // namespace

DType StagedWeightDType(const BatchKey& key) {
  return key.weight_dtype == DType::kF32 || key.weight_dtype == key.x_dtype
             ? key.weight_dtype
             : DType::kF32;
}

PieceBytes BytesOfPiece(const BatchKey& key, const ConvSegment& seg,
                        int64_t b_count) {
  const int64_t xs = DTypeSize(key.x_dtype);
  const int64_t ws = DTypeSize(StagedWeightDType(key));
  const int64_t d = key.dim;
  PieceBytes p;
  p.x = b_count * d * seg.seqlen * xs;
  p.state = b_count * d * (key.width - 1) * xs;
  p.conv_state = b_count * d * seg.state_len * xs;
  p.weight = d * key.width * ws;
  p.bias = d * ws;
  p.dweight = d * key.width * 4;
  p.dbias = d * 4;
  return p;
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
  const Staged s = StagedFor(key);
  for (Round& r : rounds) {
    r.table_offset = 0;
    r.table_bytes = table_bytes(r.pieces.size());
    int64_t at = r.table_bytes;
    auto place = [&at](bool on, int64_t bytes) -> int64_t {
      if (!on) return -1;
      const int64_t off = at;
      at += AlignUp(bytes);
      return off;
    };
    r.slots.resize(r.pieces.size());
    for (size_t p = 0; p < r.pieces.size(); ++p) {
      const Piece& pc = r.pieces[p];
      const ConvSegment& seg = *segments[pc.segment];
      const PieceBytes pb = BytesOfPiece(key, seg, pc.b_count);
      const bool stage_w = !weights_on_device[pc.segment];
      PieceSlots& sl = r.slots[p];
      sl.x = place(s.x, pb.x);
      sl.dout = place(s.dout, pb.x);
      sl.weight = place(stage_w, pb.weight);
      sl.bias = place(stage_w && key.has_bias, pb.bias);
      sl.initial_states = place(s.initial_states, pb.state);
      sl.dfinal_states = place(s.dfinal_states, pb.state);
      sl.conv_state = place(s.conv_state, pb.conv_state);
      r.workspace_bytes += options.piece_workspace(seg, pc.b_count);
    }
    r.input_end = at;
    r.output_begin = at;
    for (size_t p = 0; p < r.pieces.size(); ++p) {
      const Piece& pc = r.pieces[p];
      const PieceBytes pb = BytesOfPiece(key, *segments[pc.segment], pc.b_count);
      PieceSlots& sl = r.slots[p];
      sl.y = place(s.y, pb.x);
      sl.dx = place(s.dx, pb.x);
      sl.final_states = place(s.final_states, pb.state);
      sl.dinitial_states = place(s.dinitial_states, pb.state);
      sl.conv_state_out = place(s.conv_state_out, pb.conv_state);
      sl.dweight = place(s.dweight, pb.dweight);
      sl.dbias = place(s.dbias, pb.dbias);
    }
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
