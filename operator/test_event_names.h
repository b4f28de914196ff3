// Test helper: the pod names an Event note mentions, the inverse of CompactNames (event_notes.h).
// Test-only; a malformed range fails the calling test.
#ifndef SLUICE_OPERATOR_TEST_EVENT_NAMES_H_
#define SLUICE_OPERATOR_TEST_EVENT_NAMES_H_

#include <set>
#include <string>

namespace sluice::op::testing {

// Every name starting with `prefix` in `note`, with "prefix[a-b,c]" ranges expanded.
std::set<std::string> NamesIn(const std::string& note, const std::string& prefix);

}  // namespace sluice::op::testing

#endif  // SLUICE_OPERATOR_TEST_EVENT_NAMES_H_
