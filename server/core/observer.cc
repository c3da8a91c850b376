#include "server/core/observer.h"

namespace conv1d {

const char* RejectReasonName(RejectReason r) {
  switch (r) {
    case RejectReason::kInvalid: return "invalid";
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kDeadline: return "deadline";
    case RejectReason::kCancelled: return "cancelled";
    case RejectReason::kTooLarge: return "too_large";
    case RejectReason::kDraining: return "draining";
  }
  return "unknown";
}

const char* SessionEventName(SessionEvent e) {
  switch (e) {
    case SessionEvent::kOpened: return "opened";
    case SessionEvent::kClosed: return "closed";
    case SessionEvent::kExpired: return "expired";
    case SessionEvent::kFailed: return "failed";
  }
  return "unknown";
}

}  // namespace conv1d
