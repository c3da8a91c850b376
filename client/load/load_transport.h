// How conv1d_load's pooled requests reach the server and their answers come
// back: a protocol (`v1`: conv1d.v1.Conv1d; `oip`: the Open Inference
// Protocol's ModelInfer) times a memory kind (`grpc`: tensor bytes inside
// the messages; `system`: inputs and outputs in a POSIX shared-memory region
// registered with the server, the messages carrying references; region.h
// holds the kinds). The load runner measures every combination the same
// way, so their rates compare.
//
// The pool's requests are conv1d.v1 messages (workload.h); a transport
// translates each once at Prepare (an inference-protocol request with the
// same tensors and parameters; with `system`, the inputs copied into the
// region). With `system`, each send takes one of `max_in_flight` output
// slots of the region and gives it back when its answer has been read, so
// answers of concurrent sends never share memory. Every answer can be
// returned as the conv1d.v1 response of its op (outputs read back from the
// region), which is what the runner verifies against the CPU reference.
//
// `system` serves fwd workloads (outputs y and final_states); other ops are
// refused at Prepare.
//
// Used by LoadRunner. Thread-safety: Prepare and Teardown from one thread,
// before and after every Send; Send from any thread; `done` runs on a gRPC
// callback thread (or inline when the send fails at once).
#ifndef CONV1D_CLIENT_LOAD_LOAD_TRANSPORT_H_
#define CONV1D_CLIENT_LOAD_LOAD_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/conv1d_client.h"
#include "client/load/region.h"
#include "client/workload.h"

namespace conv1d {

struct LoadAnswer {
  int64_t output_bytes = 0;  // tensor bytes of the answer (message or region)
  // Filled when the send asked for the answer: conv1d.v1's response of the
  // request's op, every tensor's bytes in `data`.
  v1::ForwardResponse forward;
  v1::BackwardResponse backward;
  v1::UpdateResponse update;
};

class LoadTransport {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<LoadAnswer>)>;
  virtual ~LoadTransport() = default;
  virtual const char* protocol() const = 0;  // "v1" | "oip"
  virtual const char* memory() const = 0;    // "grpc" | "system"

  // The pool (kept alive by the caller until Teardown), the workloads its
  // requests' spec_index names, and the most sends outstanding at once.
  virtual absl::Status Prepare(const std::vector<const PreparedRequest*>& pool,
                               const std::vector<WorkloadSpec>& specs, int max_in_flight) = 0;
  // Sends pool[index]; with `want_answer` the LoadAnswer carries the
  // response. `done` runs exactly once.
  virtual void Send(int index, bool want_answer, const CallOptions& call, Done done) = 0;
  // Unregisters and removes what Prepare made.
  virtual void Teardown() {}
};

bool IsLoadProtocol(absl::string_view protocol);  // v1, oip
bool IsLoadMemory(absl::string_view memory);      // grpc, or a region kind

// INVALID_ARGUMENT naming the flag for an unknown protocol or memory.
absl::StatusOr<std::unique_ptr<LoadTransport>> MakeLoadTransport(absl::string_view protocol,
                                                                 absl::string_view memory,
                                                                 Conv1dClient* client);

// ---- pieces shared by the transports ----

// A request tensor that carries bytes, under its inference-protocol name.
struct NamedTensor {
  const char* name;
  const v1::Tensor* tensor;
};
// Every tensor of the request with data (x, weight, bias, initial_states,
// dout, dfinal_states, conv_state).
std::vector<NamedTensor> RequestTensors(const PreparedRequest& p);

// Where a request's inputs and a send's outputs are in a region: inputs per
// pool item, and output slots of `slot_bytes`, taken and given back.
class RegionLayout {
 public:
  struct Place {
    std::string name;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  // Lays out the inputs of every pool request (fwd only), copies them in,
  // creates `kind`'s region named `name` and registers it.
  static absl::StatusOr<std::unique_ptr<RegionLayout>> Create(
      absl::string_view kind, const std::string& name,
      const std::vector<const PreparedRequest*>& pool, const std::vector<WorkloadSpec>& specs,
      int slots, Conv1dClient* client);
  ~RegionLayout();

  TensorRegion& region() { return *region_; }
  const std::vector<Place>& inputs(int index) const { return inputs_[index]; }
  // The outputs of pool[index] in `slot`: y, then final_states when asked.
  std::vector<Place> outputs(int index, int slot) const;
  int TakeSlot();  // -1 when every slot is taken
  void GiveSlot(int slot);
  void Unregister();

 private:
  RegionLayout() = default;
  std::unique_ptr<TensorRegion> region_;
  Conv1dClient* client_ = nullptr;
  bool registered_ = false;
  std::vector<std::vector<Place>> inputs_;
  std::vector<std::vector<Place>> outputs_;  // per pool item, offsets within a slot
  int64_t slots_offset_ = 0, slot_bytes_ = 0;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
};

// Bytes of a region's range into `t` (dtype and shape already set).
absl::Status ReadInto(TensorRegion& region, int64_t offset, int64_t bytes, v1::Tensor* t);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_LOAD_TRANSPORT_H_
