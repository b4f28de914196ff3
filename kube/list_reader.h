// ListReader: reads a Kubernetes list body ({"apiVersion", "kind", "metadata", "items": [...]})
// item by item, without ever holding the whole list as a JSON tree.
//
// A JSON tree costs several times the text it came from (a list of 3,000 pods, 12 MB of text, is
// about 80 MB as a nlohmann::json), and an informer usually keeps only a few fields of each item
// (ReflectorOptions::transform). The reader is a SAX handler: it builds one item at a time, hands
// it to a callback (which may transform it and keep what it needs), and keeps only the list's
// other top-level fields (metadata: resourceVersion, continue) as a tree.
//
// Errors are DataLoss statuses prefixed with `what` (e.g. "GET /api/v1/pods"): a body that is not
// JSON (with the position and nlohmann's reason), not an object, "items" that is not an array, an
// item that is not an object or has no metadata.name. A callback's non-OK status stops the read and
// is returned as it is.
//
// Threading: a function of its arguments; the stream is read on the calling thread.
#ifndef SLUICE_KUBE_LIST_READER_H_
#define SLUICE_KUBE_LIST_READER_H_

#include <cstddef>
#include <functional>
#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

// Called with each item (in order) and its index in "items".
using ListItemCallback = std::function<absl::Status(size_t index, nlohmann::json&& item)>;

// How much of a body that is not JSON an error quotes.
inline constexpr size_t kBodyStartBytes = 120;

// Reads a list from `in` (until its end). On success `*head` is the list object without "items"
// (an object: apiVersion, kind, metadata, whatever else the server sent). `body_start`, when set,
// gives the body's first bytes for the error about a body that is not JSON.
absl::Status ReadList(std::istream& in, absl::string_view what, const ListItemCallback& on_item, nlohmann::json* head,
                      const std::function<std::string()>& body_start = {});
// The same from text.
absl::Status ReadList(absl::string_view text, absl::string_view what, const ListItemCallback& on_item,
                      nlohmann::json* head);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_LIST_READER_H_
