#include "server/core/backend.h"

namespace conv1d {

BackendInfo BackendInfo::Of(Backend& backend) {
  BackendInfo info;
  info.name = backend.name();
  info.devices = backend.devices();
  info.limits = backend.limits();
  info.host_buffers = backend.host_buffers();
  if (info.host_buffers == nullptr) info.host_buffers = std::make_shared<HeapHostBuffers>();
  return info;
}

}  // namespace conv1d
