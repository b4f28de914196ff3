// Packed cache entries round-trip and keep what the runtime reads (keys, resourceVersion, indexes,
// the controller owner handler).
#include "kube/packed_object.h"

#include <catch2/catch.hpp>

#include "kube/reflector.h"
#include "kube/resource.h"
#include "kube/store.h"
#include "kube/workqueue.h"

namespace sluice::kube {
namespace {

using nlohmann::json;

json Pod() {
  return json::parse(R"js({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "w-0", "namespace": "ml", "uid": "u-1", "resourceVersion": "42",
                 "labels": {"app": "w"}, "managedFields": [{"manager": "m"}],
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "o-1"},
                                     {"apiVersion": "sluice.dev/v1alpha1", "kind": "DataService", "name": "ds",
                                      "uid": "ds-1", "controller": true, "blockOwnerDeletion": true}]},
    "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}})js");
}

TEST_CASE("packed objects round-trip and keep the runtime's metadata") {
  json packed = PackObject(Pod());
  CHECK(IsPacked(packed));
  CHECK_FALSE(IsPacked(Pod()));
  CHECK(UnpackObject(packed) == Pod());
  CHECK(UnpackObject(Pod()) == Pod());  // not packed: as it is
  CHECK(ObjectKey(packed) == "ml/w-0");
  CHECK(ResourceVersionOf(packed) == "42");
  CHECK(packed["metadata"]["controllerRef"] == "DataService/ds/ds-1");
  std::optional<PackedController> ref = PackedControllerOf(packed);
  REQUIRE(ref.has_value());
  CHECK(ref->kind == "DataService");
  CHECK(ref->name == "ds");
  CHECK(ref->uid == "ds-1");
  CHECK_FALSE(PackedControllerOf(Pod()).has_value());
  CHECK_FALSE(packed["metadata"].contains("labels"));
  CHECK(packed["metadata"].size() == 4);

  Store store;
  REQUIRE(store.AddIndex("controller", IndexByControllerUid()).ok());
  REQUIRE(store.AddIndex("owner", IndexByOwnerUid()).ok());
  REQUIRE(store.AddIndex("ns", IndexByNamespace()).ok());
  store.Upsert(std::make_shared<const json>(packed));
  CHECK(store.ByIndex("controller", "ds-1").size() == 1);
  CHECK(store.ByIndex("controller", "o-1").empty());
  CHECK(store.ByIndex("owner", "ds-1").size() == 1);  // packed: only the controller is known
  CHECK(store.ByIndex("ns", "ml").size() == 1);

  WorkQueue queue;
  EnqueueControllerOwnerHandler(&queue, "DataService").on_add(std::make_shared<const json>(packed));
  REQUIRE(queue.Len() == 1);
  CHECK(*queue.Get() == "ml/ds");
}

TEST_CASE("packing odd objects") {
  CHECK(PackObject(json("text")) == json("text"));
  CHECK(PackObject(json::array({1})) == json::array({1}));
  json no_meta = PackObject(json{{"spec", 1}});
  CHECK(no_meta["metadata"] == json::object());
  CHECK(UnpackObject(no_meta) == json{{"spec", 1}});
  json odd_owners = PackObject(json{{"metadata", {{"name", "a"}, {"ownerReferences", "x"}}}});
  CHECK_FALSE(odd_owners["metadata"].contains("controllerRef"));
  json slashed = PackObject(json{{"metadata", {{"name", "a"}, {"ownerReferences", {{{"controller", true},
      {"kind", "A/B"}, {"name", "n"}, {"uid", "u"}}}}}}});
  CHECK_FALSE(PackedControllerOf(slashed).has_value());
  json bad_ref = json{{"packed", "{}"}, {"metadata", {{"controllerRef", "no-slashes"}}}};
  CHECK_FALSE(PackedControllerOf(bad_ref).has_value());
  CHECK(UnpackObject(json{{"packed", "{not json"}}).is_discarded());
}

}  // namespace
}  // namespace sluice::kube
