// Packed cache entries: an informer transform that stores an object as its identity (the metadata
// the kube/ runtime itself reads) plus the whole object serialized into one string, and its inverse.
//
// A nlohmann::json object costs roughly 100-200 bytes per field, so a few thousand cached pods take
// tens of megabytes; the same objects as JSON text take a fifth of that. Packing trades memory for
// a parse on each read, which suits caches that are large and read rarely (a controller reads a
// handful of objects per reconcile).
//
// Packed form: {"metadata": {name, namespace, resourceVersion, controllerRef: "<kind>/<name>/<uid>"
// (the controller ownerReference, when there is one)}, "packed": "<JSON>"}. Store keys,
// resourceVersion diffs, IndexByNamespace, IndexByControllerUid, IndexByOwnerUid (which then sees
// only the controller) and EnqueueControllerOwnerHandler understand it; everything else must
// UnpackObject first.
//
// Threading: pure functions.
#ifndef SLUICE_KUBE_PACKED_OBJECT_H_
#define SLUICE_KUBE_PACKED_OBJECT_H_

#include <optional>
#include <string>

#include "nlohmann/json.hpp"

namespace sluice::kube {

// Packs an object (a non-object is returned as it is).
nlohmann::json PackObject(nlohmann::json&& object);
// The object PackObject was given; an object that is not packed is returned as it is. A packed
// string that does not parse (never written by PackObject) yields a discarded value.
nlohmann::json UnpackObject(const nlohmann::json& object);
bool IsPacked(const nlohmann::json& object);

// The controller ownerReference recorded in a packed object's metadata.
struct PackedController {
  std::string kind;
  std::string name;
  std::string uid;
};
std::optional<PackedController> PackedControllerOf(const nlohmann::json& object);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_PACKED_OBJECT_H_
