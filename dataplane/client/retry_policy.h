// The client's one retry policy: what every loop that calls the dispatcher or a worker does after
// a failed call — retry or give up, after how long, and whether the retry waits for the channel.
// Each loop (Create's registration, the session's heartbeats, a task reader, the round reader)
// owns one RetryPolicy for its peer; the rules below are the only place they are decided.
//
// Which failures are retried, by peer:
//  - kDispatcherAtCreate (RegisterDataset, GetOrCreateJob): UNAVAILABLE, DEADLINE_EXCEEDED,
//    RESOURCE_EXHAUSTED and ABORTED (the dispatcher is not up yet, or busy); anything else is the
//    dispatcher's answer to a wrong request and fails Create at once. The caller bounds the
//    retrying by create_timeout.
//  - kDispatcherSession (heartbeats): everything except the permanent codes (INVALID_ARGUMENT,
//    FAILED_PRECONDITION, PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED, OUT_OF_RANGE,
//    DATA_LOSS) and NOT_FOUND (a dispatcher restarted without its journal forgot this client).
//  - kWorkerStream and kWorkerRound (GetElements, GetElement): UNAVAILABLE, CANCELLED (by the
//    server), DEADLINE_EXCEEDED, ABORTED and NOT_FOUND (a restarted worker that does not know the
//    task yet) — a stream that closed without end_of_sequence counts as UNAVAILABLE; INTERNAL and
//    UNKNOWN (gRPC reports some transport failures so) up to kMaxAmbiguousFailures times in a row
//    without progress; every other code is the worker's own answer (a pipeline error, a rejected
//    request) and is not retried.
//
// Delays: exponential backoff with jitter (backoff.h) from initial_backoff to max_backoff, started
// over by a success or by a failed call that made progress first (a stream that delivered).
//
// Reconnecting: this client uses gRPC's synchronous API, whose calls are the only thing that
// drives (polls) a channel's connection attempts; a call that fails fast on a broken channel
// leaves the attempt to gRPC's backup poller, which runs every 5 s. So after a failure the retry
// is made with wait_for_ready: it waits, polling, until the channel connects or its deadline
// passes — a restarted dispatcher or worker is found again within one connection attempt (was
// 5-15 s). The first attempt still fails fast, so an outage is noticed at once. Coordinated round
// reads (kWorkerRound) never wait for a channel: each retry picks the round's worker again from
// the latest task list, so a worker that is gone is not waited for.
//
// Not thread-safe: one per loop.
#ifndef SLUICE_DATAPLANE_CLIENT_RETRY_POLICY_H_
#define SLUICE_DATAPLANE_CLIENT_RETRY_POLICY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dataplane/client/backoff.h"

namespace sluice::client {

inline constexpr int kMaxAmbiguousFailures = 3;

class RetryPolicy {
 public:
  enum class Peer { kDispatcherAtCreate, kDispatcherSession, kWorkerStream, kWorkerRound };
  struct Decision {
    bool retry = false;
    absl::Duration delay = absl::ZeroDuration();  // when retrying: wait this long first
  };

  RetryPolicy(Peer peer, absl::Duration initial_backoff, absl::Duration max_backoff);

  // After a failed call with `code`. `progressed`: the call delivered something before it failed
  // (the backoff and the count of ambiguous failures start over).
  Decision OnFailure(absl::StatusCode code, bool progressed = false);
  // After a successful call.
  void OnSuccess();
  // Whether the next attempt should wait for its channel to connect (see "Reconnecting").
  bool wait_for_ready() const { return failed_ && peer_ != Peer::kWorkerRound; }

  // Whether `code` is retried for `peer` (ignoring the limit on ambiguous failures).
  static bool Retriable(Peer peer, absl::StatusCode code);

 private:
  const Peer peer_;
  Backoff backoff_;
  bool failed_ = false;         // the last call failed
  int ambiguous_failures_ = 0;  // consecutive INTERNAL/UNKNOWN without progress (worker peers)
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_RETRY_POLICY_H_
