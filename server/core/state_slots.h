// StateSlots: the memory of a backend's decode-session state slots, and the
// few operations a session needs on it besides compute.
//
// A pool of `num_slots` equal slots of `slot_bytes` each, made once at start
// (Backend::CreateStateSlots) and never grown. The SessionManager decides
// which slot a session holds; this interface only addresses slots by index.
// A slot's bytes are the view that a session's update tasks read and write
// in place (TensorView::data / OutputView::data with the slot's Placement):
// host memory on the CPU and echo backends (HostStateSlots, below), device
// memory of kind kDeviceOwned on a GPU backend, whose fused update launch
// then reads and writes states by slot index (Placement::region names the
// pool, Placement::offset the slot's byte offset in it).
//
// Write, Read, Copy and ShiftRight move bytes between host memory and slots
// or between slots; they are blocking and complete before they return.
//
// Thread-safety: every method may be called concurrently from any thread for
// different slots. The caller (SessionManager) never runs two operations, or
// an operation and a compute task, on the same slot at once.
#ifndef CONV1D_SERVER_CORE_STATE_SLOTS_H_
#define CONV1D_SERVER_CORE_STATE_SLOTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/tensor.h"

namespace conv1d {

struct StateSlotsOptions {
  // Bytes of one slot: the largest session state [B, D, K + max_draft_tokens]
  // the pool can hold. Valid range 1..2^40; otherwise INVALID_ARGUMENT.
  int64_t slot_bytes = int64_t{1} << 20;
  // Slots in the pool, i.e. the most sessions open at once.
  // Valid range 1..1'048'576; otherwise INVALID_ARGUMENT.
  int32_t num_slots = 256;
  // The device the pool lives on, for device backends.
  int32_t device = 0;
};

class StateSlots {
 public:
  virtual ~StateSlots() = default;

  int64_t slot_bytes() const { return slot_bytes_; }
  int32_t num_slots() const { return num_slots_; }

  // The address compute tasks use for slot `slot` (a host pointer for host
  // pools, a device address for device pools) and where it is.
  // REQUIRES: 0 <= slot < num_slots().
  virtual void* SlotData(int32_t slot) = 0;
  virtual Placement SlotPlacement(int32_t slot) const = 0;

  // Copies `bytes` host bytes into slot `slot` at byte `offset`; a null
  // `src` writes zeros. REQUIRES: 0 <= offset, offset + bytes <= slot_bytes().
  virtual absl::Status Write(int32_t slot, int64_t offset, const void* src,
                             int64_t bytes) = 0;
  // Copies `bytes` from slot `slot` at byte `offset` into host memory.
  virtual absl::Status Read(int32_t slot, int64_t offset, void* dst,
                            int64_t bytes) = 0;
  // Copies the first `bytes` of slot `src` into slot `dst` (src != dst).
  virtual absl::Status Copy(int32_t src, int32_t dst, int64_t bytes) = 0;
  // Views the first rows * row_len elements of slot `slot` as `rows` rows of
  // `row_len` elements of `elem_bytes` each and moves every row `shift`
  // elements towards its end: row[i] = row[i - shift] for i >= shift, and
  // row[0 .. shift) = 0. This is a session's rollback (session_manager.h).
  // REQUIRES: 0 <= shift <= row_len; rows * row_len * elem_bytes <= slot_bytes().
  virtual absl::Status ShiftRight(int32_t slot, int64_t rows, int64_t row_len,
                                  int64_t elem_bytes, int64_t shift) = 0;

 protected:
  StateSlots(int64_t slot_bytes, int32_t num_slots)
      : slot_bytes_(slot_bytes), num_slots_(num_slots) {}

 private:
  const int64_t slot_bytes_;
  const int32_t num_slots_;
};

// INVALID_ARGUMENT naming the field when `options` is out of range.
absl::Status ValidateStateSlotsOptions(const StateSlotsOptions& options);

// Slots in ordinary host memory, for backends that compute on the host. The
// pool is one zero-initialised allocation of num_slots * slot_bytes, whose
// pages the OS maps on first touch. Slot views are kHostHeap memory.
class HostStateSlots final : public StateSlots {
 public:
  static absl::StatusOr<std::unique_ptr<HostStateSlots>> Create(
      const StateSlotsOptions& options);
  ~HostStateSlots() override;

  void* SlotData(int32_t slot) override;
  Placement SlotPlacement(int32_t slot) const override;
  absl::Status Write(int32_t slot, int64_t offset, const void* src,
                     int64_t bytes) override;
  absl::Status Read(int32_t slot, int64_t offset, void* dst, int64_t bytes) override;
  absl::Status Copy(int32_t src, int32_t dst, int64_t bytes) override;
  absl::Status ShiftRight(int32_t slot, int64_t rows, int64_t row_len,
                          int64_t elem_bytes, int64_t shift) override;

 private:
  HostStateSlots(const StateSlotsOptions& options, char* base)
      : StateSlots(options.slot_bytes, options.num_slots), base_(base) {}
  absl::Status CheckRange(int32_t slot, int64_t offset, int64_t bytes) const;

  char* const base_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_STATE_SLOTS_H_
