// LeaseEndpoint: a tiny coordination.k8s.io/v1 Lease endpoint on a FixtureServer (its fallback
// handler) with optimistic concurrency — GET answers the current Lease (404 before one is set), a
// PUT with the current resourceVersion replaces it and bumps the version, any other PUT gets the
// recorded 409 Conflict — so leader election can be exercised end to end in tests.
//
// Threading: thread-safe (the server's connection threads call the handler).
#ifndef SLUICE_KUBE_TESTING_LEASE_ENDPOINT_H_
#define SLUICE_KUBE_TESTING_LEASE_ENDPOINT_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kube/testing/fixture_server.h"
#include "nlohmann/json.hpp"

namespace sluice::kube::testing {

class LeaseEndpoint {
 public:
  explicit LeaseEndpoint(FixtureServer* server);
  // Replaces the Lease (with a new resourceVersion).
  void Set(nlohmann::json lease);
  nlohmann::json Get();
  // The next PUT is answered 409 whatever its resourceVersion (another candidate won a race).
  void FailNextPut();

 private:
  Reply Handle(const RecordedRequest& r);

  absl::Mutex mu_;
  nlohmann::json lease_ ABSL_GUARDED_BY(mu_);
  int rv_ ABSL_GUARDED_BY(mu_) = 500;
  bool fail_next_put_ ABSL_GUARDED_BY(mu_) = false;
};

// The recorded Lease (fixtures "leases" #0) with another holder and renewTime.
nlohmann::json LeaseHeldBy(const std::string& holder, const std::string& renew_time);

}  // namespace sluice::kube::testing

#endif  // SLUICE_KUBE_TESTING_LEASE_ENDPOINT_H_
