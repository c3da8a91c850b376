#include "server/core/partitioned_state_slots.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace conv1d {

absl::StatusOr<std::unique_ptr<PartitionedStateSlots>> PartitionedStateSlots::Create(
    std::vector<std::unique_ptr<StateSlots>> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("a partitioned slot pool needs a part");
  const int64_t slot_bytes = parts[0]->slot_bytes();
  const int32_t per_part = parts[0]->num_slots();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == nullptr || parts[i]->slot_bytes() != slot_bytes ||
        parts[i]->num_slots() != per_part) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot pool part ", i, " differs from part 0 (", per_part, " slots of ", slot_bytes,
          " bytes)"));
    }
  }
  const int64_t total = int64_t{per_part} * static_cast<int64_t>(parts.size());
  if (total > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("slot pool of ", total, " slots is too large"));
  }
  return std::unique_ptr<PartitionedStateSlots>(new PartitionedStateSlots(
      std::move(parts), slot_bytes, static_cast<int32_t>(total)));
}

namespace {

absl::Status SlotInRange(int32_t slot, int32_t num_slots) {
  if (slot >= 0 && slot < num_slots) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("state slot ", slot, " is outside 0..", num_slots - 1));
}

}  // namespace

void* PartitionedStateSlots::SlotData(int32_t slot) { return part(slot).SlotData(local(slot)); }

Placement PartitionedStateSlots::SlotPlacement(int32_t slot) const {
  return part(slot).SlotPlacement(local(slot));
}

absl::Status PartitionedStateSlots::Write(int32_t slot, int64_t offset, const void* src,
                                          int64_t bytes) {
  if (absl::Status s = SlotInRange(slot, num_slots()); !s.ok()) return s;
  return part(slot).Write(local(slot), offset, src, bytes);
}

absl::Status PartitionedStateSlots::Read(int32_t slot, int64_t offset, void* dst,
                                         int64_t bytes) {
  if (absl::Status s = SlotInRange(slot, num_slots()); !s.ok()) return s;
  return part(slot).Read(local(slot), offset, dst, bytes);
}

absl::Status PartitionedStateSlots::Copy(int32_t src, int32_t dst, int64_t bytes) {
  if (absl::Status s = SlotInRange(src, num_slots()); !s.ok()) return s;
  if (absl::Status s = SlotInRange(dst, num_slots()); !s.ok()) return s;
  if (bytes < 0 || bytes > slot_bytes()) {
    return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes between state slots of ",
                                              slot_bytes()));
  }
  if (&part(src) == &part(dst)) return part(src).Copy(local(src), local(dst), bytes);
  std::vector<char> host(static_cast<size_t>(bytes));
  if (absl::Status s = Read(src, 0, host.data(), bytes); !s.ok()) return s;
  return Write(dst, 0, host.data(), bytes);
}

absl::Status PartitionedStateSlots::ShiftRight(int32_t slot, int64_t rows, int64_t row_len,
                                               int64_t elem_bytes, int64_t shift) {
  if (absl::Status s = SlotInRange(slot, num_slots()); !s.ok()) return s;
  return part(slot).ShiftRight(local(slot), rows, row_len, elem_bytes, shift);
}

}  // namespace conv1d
