// Reading and writing NumPy .npy files (format versions 1.0-3.0, C order,
// little-endian) for the command-line client.
//
// dtypes: '<f4' <-> fp32, '<f2' <-> fp16, and bf16 carried as '<u2' (the raw
// bf16 bits; NumPy has no bfloat16). Reading '<u2' yields a bf16 tensor;
// convert in NumPy with `(u.astype(np.uint32) << 16).view(np.float32)`.
// Fortran-order and big-endian arrays are refused. Stateless; thread-safe.
#ifndef CONV1D_CLIENT_NPY_H_
#define CONV1D_CLIENT_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/host_tensor.h"

namespace conv1d {

std::string SerializeNpy(const HostTensor& t);
absl::StatusOr<HostTensor> ParseNpy(absl::string_view bytes);

absl::Status WriteNpyFile(const std::string& path, const HostTensor& t);
absl::StatusOr<HostTensor> ReadNpyFile(const std::string& path);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_NPY_H_
