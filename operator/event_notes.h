// Event notes that name many pods without losing any to the API's note limit.
//
// An EmitEvent may carry `names` (the objects it announces) and a note template: "{}" in the note
// is replaced by the names, compacted into ordinal ranges ("ds-worker-remote-[3-40]",
// "ds-worker-remote-[0,2,5-9]"), and "{s}" by "s" when there is more than one name. RenderEvents
// merges events of one (type, reason, action) — the names of equal templates are united, different
// templates are joined with "; " — and splits the result into several events when one note would be
// longer than kMaxEventNoteBytes, so that every name appears in some event. Pure functions.
#ifndef SLUICE_OPERATOR_EVENT_NOTES_H_
#define SLUICE_OPERATOR_EVENT_NOTES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "operator/reconciler.h"

namespace sluice::op {

// The longest note an events.k8s.io/v1 Event may carry (kube::EventRecorder cuts longer ones).
inline constexpr size_t kMaxEventNoteBytes = 1024;

// "ds-worker-remote-3", "ds-worker-remote-4", "ds-worker-remote-5", "ds-worker-remote-9" ->
// "ds-worker-remote-[3-5,9]". Names are grouped by the prefix before their trailing "-<ordinal>"
// (groups in order of first appearance, ordinals ascending, duplicates dropped); a group of one is
// the plain name; names without an ordinal are kept as they are. Groups are joined with ", ".
std::string CompactNames(const std::vector<std::string>& names);

// The note of `event` with its names filled in (no splitting).
std::string RenderNote(const EmitEvent& event);

// Merges and renders `events` (see above): the result has no `names`, every note fits in
// `max_note_bytes`, and events keep the order of their first (type, reason, action).
std::vector<EmitEvent> RenderEvents(const std::vector<EmitEvent>& events, size_t max_note_bytes = kMaxEventNoteBytes);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_EVENT_NOTES_H_
