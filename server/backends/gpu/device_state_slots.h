// DeviceStateSlots: the GPU backend's decode-session state slots, one
// allocation of device memory made when the server starts. A session step's
// conv_state and conv_state_out point at its slot (Placement kDeviceOwned on
// the pool's device), so the fused update launch reads and writes states
// where they are and only x and y cross the bus.
//
// Write / Read / Copy / ShiftRight run on the pool's own stream and wait for
// it; ShiftRight (a session's rollback) moves the rows through a scratch
// slot on the device. Thread-safety: methods may be called concurrently for
// different slots (the scratch slot is taken under a lock).
#ifndef CONV1D_SERVER_BACKENDS_GPU_DEVICE_STATE_SLOTS_H_
#define CONV1D_SERVER_BACKENDS_GPU_DEVICE_STATE_SLOTS_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/gpu_compat.h"
#include "server/core/state_slots.h"

namespace conv1d::gpu {

class DeviceStateSlots final : public StateSlots {
 public:
  // Allocates num_slots * slot_bytes (+ one scratch slot) on options.device,
  // zeroed. RESOURCE_EXHAUSTED when the device has no room.
  static absl::StatusOr<std::unique_ptr<DeviceStateSlots>> Create(
      const StateSlotsOptions& options);
  ~DeviceStateSlots() override;

  void* SlotData(int32_t slot) override;
  Placement SlotPlacement(int32_t slot) const override;
  absl::Status Write(int32_t slot, int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Read(int32_t slot, int64_t offset, void* dst, int64_t bytes) override;
  absl::Status Copy(int32_t src, int32_t dst, int64_t bytes) override;
  absl::Status ShiftRight(int32_t slot, int64_t rows, int64_t row_len, int64_t elem_bytes,
                          int64_t shift) override;

 private:
  DeviceStateSlots(const StateSlotsOptions& options, char* base, hipStream_t stream)
      : StateSlots(options.slot_bytes, options.num_slots),
        device_(options.device),
        base_(base),
        stream_(stream) {}
  absl::Status CheckRange(int32_t slot, int64_t offset, int64_t bytes) const;
  // Runs on the pool's stream and waits; `what` names the step in errors.
  absl::Status Finish(hipError_t err, const char* what);

  const int32_t device_;
  char* const base_;  // num_slots slots, then the scratch slot
  const hipStream_t stream_;
  absl::Mutex scratch_mu_;  // held while ShiftRight uses the scratch slot
};

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_DEVICE_STATE_SLOTS_H_
