#include "dataplane/dispatcher/client_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace sluice::dispatcher {

absl::Status CheckClientMetrics(const service::ClientMetrics& m) {
  auto bad_double = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad_double(m.wait_seconds_total())) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.wait_seconds_total is ", m.wait_seconds_total(), "; must be a finite number >= 0"));
  }
  if (bad_double(m.step_seconds_total())) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.step_seconds_total is ", m.step_seconds_total(), "; must be a finite number >= 0"));
  }
  if (m.elements_total() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.elements_total is ", m.elements_total(), "; must be >= 0"));
  }
  if (m.bytes_total() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.bytes_total is ", m.bytes_total(), "; must be >= 0"));
  }
  return absl::OkStatus();
}

service::ClientMetrics ClientMetricsTotals::Report(int64_t client_id, int64_t job_id,
                                                   const service::ClientMetrics& totals) {
  auto known = last_.find(client_id);
  if (known == last_.end()) known = last_.emplace(client_id, totals).first;  // no baseline: see the header
  service::ClientMetrics& last = known->second;
  service::ClientMetrics delta;
  delta.set_wait_seconds_total(std::max(0.0, totals.wait_seconds_total() - last.wait_seconds_total()));
  delta.set_step_seconds_total(std::max(0.0, totals.step_seconds_total() - last.step_seconds_total()));
  delta.set_elements_total(std::max<int64_t>(0, totals.elements_total() - last.elements_total()));
  delta.set_bytes_total(std::max<int64_t>(0, totals.bytes_total() - last.bytes_total()));
  last = totals;
  service::ClientMetrics& sum = per_job_[job_id];
  sum.set_wait_seconds_total(sum.wait_seconds_total() + delta.wait_seconds_total());
  sum.set_step_seconds_total(sum.step_seconds_total() + delta.step_seconds_total());
  sum.set_elements_total(sum.elements_total() + delta.elements_total());
  sum.set_bytes_total(sum.bytes_total() + delta.bytes_total());
  return delta;
}

const service::ClientMetrics* ClientMetricsTotals::JobTotals(int64_t job_id) const {
  auto it = per_job_.find(job_id);
  return it == per_job_.end() ? nullptr : &it->second;
}

}  // namespace sluice::dispatcher
