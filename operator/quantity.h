// Kubernetes resource quantities ("500m", "2", "1.5", "1Gi", "2e3") parsed into numbers.
// Pure functions; safe to call from any thread.
#ifndef SLUICE_OPERATOR_QUANTITY_H_
#define SLUICE_OPERATOR_QUANTITY_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace sluice::op {

// Parses a quantity and returns its value in thousandths of the unit ("500m" -> 500,
// "2" -> 2000, "1Ki" -> 1024000), rounded up like Kubernetes' MilliValue. Errors name the
// offending text; values beyond int64 range and negative values are rejected.
absl::StatusOr<int64_t> ParseQuantityMillis(absl::string_view text);

// Formats a CPU amount given in millicores the way Kubernetes prints it ("1500m", "2").
std::string FormatCpuMillis(int64_t millis);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_QUANTITY_H_
