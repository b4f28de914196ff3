#include "dataplane/client/retry_policy.h"

namespace sluice::client {
namespace {

bool IsAmbiguous(absl::StatusCode code) {
  return code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown;
}

bool IsWorker(RetryPolicy::Peer peer) {
  return peer == RetryPolicy::Peer::kWorkerStream || peer == RetryPolicy::Peer::kWorkerRound;
}

}  // namespace

RetryPolicy::RetryPolicy(Peer peer, absl::Duration initial_backoff, absl::Duration max_backoff)
    : peer_(peer), backoff_(initial_backoff, max_backoff) {}

bool RetryPolicy::Retriable(Peer peer, absl::StatusCode code) {
  using C = absl::StatusCode;
  switch (peer) {
    case Peer::kDispatcherAtCreate:
      return code == C::kUnavailable || code == C::kDeadlineExceeded || code == C::kResourceExhausted ||
             code == C::kAborted;
    case Peer::kDispatcherSession:
      switch (code) {
        case C::kInvalidArgument:
        case C::kFailedPrecondition:
        case C::kPermissionDenied:
        case C::kUnauthenticated:
        case C::kUnimplemented:
        case C::kOutOfRange:
        case C::kDataLoss:
        case C::kNotFound:
          return false;
        default:
          return true;
      }
    case Peer::kWorkerStream:
    case Peer::kWorkerRound:
      switch (code) {
        case C::kUnavailable:
        case C::kCancelled:
        case C::kDeadlineExceeded:
        case C::kAborted:
        case C::kNotFound:
        case C::kInternal:
        case C::kUnknown:
          return true;
        default:
          return false;
      }
  }
  return false;
}

RetryPolicy::Decision RetryPolicy::OnFailure(absl::StatusCode code, bool progressed) {
  failed_ = true;
  if (progressed) {
    backoff_.Reset();
    ambiguous_failures_ = 0;
  }
  if (!Retriable(peer_, code)) return Decision{};
  if (IsWorker(peer_) && IsAmbiguous(code) && ++ambiguous_failures_ > kMaxAmbiguousFailures) return Decision{};
  return Decision{true, backoff_.Next()};
}

void RetryPolicy::OnSuccess() {
  failed_ = false;
  ambiguous_failures_ = 0;
  backoff_.Reset();
}

}  // namespace sluice::client
