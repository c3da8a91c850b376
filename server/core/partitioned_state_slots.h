// PartitionedStateSlots: one pool of decode-session state slots made of
// several equal parts, one per device (a backend with several devices gives
// each its own DeviceStateSlots). Slot s lives in part s % n, as that part's
// slot s / n, so the SessionManager, which hands out the lowest free slot
// first, spreads new sessions over the devices in turn; a session then stays
// on its slot's device (its steps carry BatchKey::device, from the slot's
// placement).
//
// Copy between slots of two parts (a fork onto another device) goes through
// host memory; everything else is the part's own operation.
//
// Thread-safety: as the parts' (methods may run concurrently for different
// slots).
#ifndef CONV1D_SERVER_CORE_PARTITIONED_STATE_SLOTS_H_
#define CONV1D_SERVER_CORE_PARTITIONED_STATE_SLOTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/state_slots.h"

namespace conv1d {

class PartitionedStateSlots final : public StateSlots {
 public:
  // `parts`: at least one, all with the same slot_bytes and num_slots.
  // INVALID_ARGUMENT otherwise.
  static absl::StatusOr<std::unique_ptr<PartitionedStateSlots>> Create(
      std::vector<std::unique_ptr<StateSlots>> parts);

  void* SlotData(int32_t slot) override;
  Placement SlotPlacement(int32_t slot) const override;
  absl::Status Write(int32_t slot, int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Read(int32_t slot, int64_t offset, void* dst, int64_t bytes) override;
  absl::Status Copy(int32_t src, int32_t dst, int64_t bytes) override;
  absl::Status ShiftRight(int32_t slot, int64_t rows, int64_t row_len, int64_t elem_bytes,
                          int64_t shift) override;

 private:
  PartitionedStateSlots(std::vector<std::unique_ptr<StateSlots>> parts, int64_t slot_bytes,
                        int32_t num_slots)
      : StateSlots(slot_bytes, num_slots), parts_(std::move(parts)) {}
  StateSlots& part(int32_t slot) const { return *parts_[slot % parts_.size()]; }
  int32_t local(int32_t slot) const { return slot / static_cast<int32_t>(parts_.size()); }

  const std::vector<std::unique_ptr<StateSlots>> parts_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_PARTITIONED_STATE_SLOTS_H_
