#include "server/core/state_slots.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

constexpr int64_t kMaxSlotBytes = int64_t{1} << 40;
constexpr int32_t kMaxSlots = 1 << 20;

}  // namespace

absl::Status ValidateStateSlotsOptions(const StateSlotsOptions& o) {
  if (o.slot_bytes < 1 || o.slot_bytes > kMaxSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_state_bytes: ", o.slot_bytes, " is outside 1..", kMaxSlotBytes));
  }
  if (o.num_slots < 1 || o.num_slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_sessions: ", o.num_slots, " is outside 1..", kMaxSlots));
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(o.slot_bytes, int64_t{o.num_slots}, &total) ||
      total > kMaxSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_state_bytes * max_sessions: ", o.slot_bytes, " * ", o.num_slots,
        " is more than ", kMaxSlotBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostStateSlots>> HostStateSlots::Create(
    const StateSlotsOptions& options) {
  if (absl::Status s = ValidateStateSlotsOptions(options); !s.ok()) return s;
  const size_t total = static_cast<size_t>(options.slot_bytes) * options.num_slots;
  // calloc of a large block maps zero pages lazily: an unused pool costs no RSS.
  char* base = static_cast<char*>(std::calloc(total, 1));
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session state pool: cannot allocate ", total, " bytes"));
  }
  return std::unique_ptr<HostStateSlots>(new HostStateSlots(options, base));
}

HostStateSlots::~HostStateSlots() { std::free(base_); }

absl::Status HostStateSlots::CheckRange(int32_t slot, int64_t offset,
                                        int64_t bytes) const {
  if (slot < 0 || slot >= num_slots() || offset < 0 || bytes < 0 ||
      offset + bytes > slot_bytes()) {
    return absl::OutOfRangeError(absl::StrCat("state slot ", slot, " bytes [", offset,
                                              ", ", offset + bytes, ") outside the slot"));
  }
  return absl::OkStatus();
}

void* HostStateSlots::SlotData(int32_t slot) { return base_ + slot * slot_bytes(); }

Placement HostStateSlots::SlotPlacement(int32_t) const { return Placement::HostHeap(); }

absl::Status HostStateSlots::Write(int32_t slot, int64_t offset, const void* src,
                                   int64_t bytes) {
  if (absl::Status s = CheckRange(slot, offset, bytes); !s.ok()) return s;
  char* dst = static_cast<char*>(SlotData(slot)) + offset;
  if (src == nullptr) {
    std::memset(dst, 0, static_cast<size_t>(bytes));
  } else {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  return absl::OkStatus();
}

absl::Status HostStateSlots::Read(int32_t slot, int64_t offset, void* dst, int64_t bytes) {
  if (absl::Status s = CheckRange(slot, offset, bytes); !s.ok()) return s;
  std::memcpy(dst, static_cast<char*>(SlotData(slot)) + offset, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostStateSlots::Copy(int32_t src, int32_t dst, int64_t bytes) {
  if (absl::Status s = CheckRange(src, 0, bytes); !s.ok()) return s;
  if (absl::Status s = CheckRange(dst, 0, bytes); !s.ok()) return s;
  if (src == dst) return absl::InvalidArgumentError("state slot copy onto itself");
  std::memcpy(SlotData(dst), SlotData(src), static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostStateSlots::ShiftRight(int32_t slot, int64_t rows, int64_t row_len,
                                        int64_t elem_bytes, int64_t shift) {
  if (shift < 0 || shift > row_len || rows < 0 || elem_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("state slot shift ", shift, " of rows of ", row_len));
  }
  if (absl::Status s = CheckRange(slot, 0, rows * row_len * elem_bytes); !s.ok()) return s;
  if (shift == 0) return absl::OkStatus();
  const size_t row_bytes = static_cast<size_t>(row_len * elem_bytes);
  const size_t shift_bytes = static_cast<size_t>(shift * elem_bytes);
  char* base = static_cast<char*>(SlotData(slot));
  for (int64_t r = 0; r < rows; ++r) {
    char* row = base + r * row_bytes;
    std::memmove(row + shift_bytes, row, row_bytes - shift_bytes);
    std::memset(row, 0, shift_bytes);
  }
  return absl::OkStatus();
}

}  // namespace conv1d
