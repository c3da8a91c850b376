#include "server/backends/gpu/device_state_slots.h"

#include "absl/strings/str_cat.h"
#include "server/backends/gpu/gpu_runtime.h"

namespace conv1d::gpu {

absl::StatusOr<std::unique_ptr<DeviceStateSlots>> DeviceStateSlots::Create(
    const StateSlotsOptions& options) {
  if (absl::Status s = ValidateStateSlotsOptions(options); !s.ok()) return s;
  if (absl::Status s = GpuStatus(hipSetDevice(options.device), "hipSetDevice"); !s.ok()) {
    return s;
  }
  const int64_t total = options.slot_bytes * (int64_t{options.num_slots} + 1);
  void* base = nullptr;
  if (DeviceAlloc(&base, total) != hipSuccess) {
    (void)hipGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "session state slots: ", total, " bytes of device memory on device ", options.device,
        " are not available; lower --max_sessions or --session_state_bytes"));
  }
  hipStream_t stream = nullptr;
  absl::Status st = GpuStatus(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking),
                              "creating the session slot stream");
  if (st.ok()) st = GpuStatus(hipMemsetAsync(base, 0, total, stream), "zeroing the slots");
  if (st.ok()) st = GpuStatus(hipStreamSynchronize(stream), "zeroing the slots");
  if (!st.ok()) {
    if (stream != nullptr) (void)hipStreamDestroy(stream);
    DeviceFree(base);
    return st;
  }
  return std::unique_ptr<DeviceStateSlots>(
      new DeviceStateSlots(options, static_cast<char*>(base), stream));
}

DeviceStateSlots::~DeviceStateSlots() {
  (void)hipSetDevice(device_);
  (void)hipStreamSynchronize(stream_);
  (void)hipStreamDestroy(stream_);
  DeviceFree(base_);
}

absl::Status DeviceStateSlots::CheckRange(int32_t slot, int64_t offset, int64_t bytes) const {
  if (slot < 0 || slot >= num_slots() || offset < 0 || bytes < 0 ||
      offset + bytes > slot_bytes()) {
    return absl::OutOfRangeError(absl::StrCat("state slot ", slot, " bytes [", offset, ", ",
                                              offset + bytes, ") outside the slot"));
  }
  return absl::OkStatus();
}

absl::Status DeviceStateSlots::Finish(hipError_t err, const char* what) {
  if (err == hipSuccess) err = hipStreamSynchronize(stream_);
  return GpuStatus(err, what);
}

void* DeviceStateSlots::SlotData(int32_t slot) { return base_ + slot * slot_bytes(); }

Placement DeviceStateSlots::SlotPlacement(int32_t slot) const {
  Placement p;
  p.kind = MemoryKind::kDeviceOwned;
  p.region = reinterpret_cast<uintptr_t>(this);
  p.offset = slot * slot_bytes();
  p.device = device_;
  return p;
}

absl::Status DeviceStateSlots::Write(int32_t slot, int64_t offset, const void* src,
                                     int64_t bytes) {
  if (absl::Status s = CheckRange(slot, offset, bytes); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  (void)hipSetDevice(device_);
  char* dst = static_cast<char*>(SlotData(slot)) + offset;
  const hipError_t err = src == nullptr
                             ? hipMemsetAsync(dst, 0, bytes, stream_)
                             : hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, stream_);
  return Finish(err, "writing a session state slot");
}

absl::Status DeviceStateSlots::Read(int32_t slot, int64_t offset, void* dst, int64_t bytes) {
  if (absl::Status s = CheckRange(slot, offset, bytes); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  (void)hipSetDevice(device_);
  return Finish(hipMemcpyAsync(dst, static_cast<char*>(SlotData(slot)) + offset, bytes,
                               hipMemcpyDeviceToHost, stream_),
                "reading a session state slot");
}

absl::Status DeviceStateSlots::Copy(int32_t src, int32_t dst, int64_t bytes) {
  if (absl::Status s = CheckRange(src, 0, bytes); !s.ok()) return s;
  if (absl::Status s = CheckRange(dst, 0, bytes); !s.ok()) return s;
  if (src == dst) return absl::InvalidArgumentError("state slot copy onto itself");
  if (bytes == 0) return absl::OkStatus();
  (void)hipSetDevice(device_);
  return Finish(hipMemcpyAsync(SlotData(dst), SlotData(src), bytes, hipMemcpyDeviceToDevice,
                               stream_),
                "copying a session state slot");
}

absl::Status DeviceStateSlots::ShiftRight(int32_t slot, int64_t rows, int64_t row_len,
                                          int64_t elem_bytes, int64_t shift) {
  if (shift < 0 || shift > row_len || rows < 0 || elem_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("state slot shift ", shift, " of rows of ", row_len));
  }
  if (absl::Status s = CheckRange(slot, 0, rows * row_len * elem_bytes); !s.ok()) return s;
  if (shift == 0 || rows == 0) return absl::OkStatus();
  const size_t row_bytes = static_cast<size_t>(row_len * elem_bytes);
  const size_t shift_bytes = static_cast<size_t>(shift * elem_bytes);
  char* data = static_cast<char*>(SlotData(slot));
  char* scratch = base_ + int64_t{num_slots()} * slot_bytes();
  absl::MutexLock lock(&scratch_mu_);
  (void)hipSetDevice(device_);
  // Rows shifted into the scratch slot (source and destination must not
  // overlap), their first `shift` elements zeroed, then copied back.
  hipError_t err = hipMemcpy2DAsync(scratch + shift_bytes, row_bytes, data, row_bytes,
                                    row_bytes - shift_bytes, rows, hipMemcpyDeviceToDevice,
                                    stream_);
  if (err == hipSuccess) {
    err = hipMemset2DAsync(scratch, row_bytes, 0, shift_bytes, rows, stream_);
  }
  if (err == hipSuccess) {
    err = hipMemcpyAsync(data, scratch, row_bytes * rows, hipMemcpyDeviceToDevice, stream_);
  }
  return Finish(err, "rolling back a session state slot");
}

}  // namespace conv1d::gpu
