#include "kube/store.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "kube/resource.h"

namespace sluice::kube {
namespace {

using nlohmann::json;

ObjectPtr Pod(const std::string& ns, const std::string& name, const std::string& rv, const std::string& role,
              const std::string& owner_uid = "", bool controller = true) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"namespace", ns}, {"name", name}, {"resourceVersion", rv}, {"labels", {{"role", role}}}}}};
  if (!owner_uid.empty()) {
    pod["metadata"]["ownerReferences"] = json::array(
        {{{"apiVersion", "x/v1"}, {"kind", "Owner"}, {"name", "o"}, {"uid", owner_uid}, {"controller", controller}}});
  }
  return std::make_shared<const json>(pod);
}

TEST_CASE("store keys objects by namespace/name and keeps indexes current") {
  Store store;
  REQUIRE(store.AddIndex("role", IndexByLabel("role")).ok());
  REQUIRE(store.AddIndex("owner", IndexByOwnerUid()).ok());
  REQUIRE(store.AddIndex("controller", IndexByControllerUid()).ok());
  CHECK(absl::IsAlreadyExists(store.AddIndex("role", IndexByLabel("x"))));
  CHECK(store.Upsert(Pod("a", "p1", "1", "worker", "u1")) == nullptr);
  CHECK(store.Upsert(Pod("a", "p2", "1", "worker", "u1", false)) == nullptr);
  CHECK(store.Upsert(Pod("b", "p1", "1", "dispatcher")) == nullptr);
  CHECK(store.size() == 3);
  CHECK(store.Get("a/p1") != nullptr);
  CHECK(store.Get("b", "p1") != nullptr);
  CHECK(store.ByIndex("role", "worker").size() == 2);
  CHECK(store.ByIndex("owner", "u1").size() == 2);
  CHECK(store.ByIndex("controller", "u1").size() == 1);
  CHECK(store.ByIndex("nope", "x").empty());

  ObjectPtr previous = store.Upsert(Pod("a", "p1", "2", "dispatcher", "u1"));
  REQUIRE(previous != nullptr);
  CHECK(ResourceVersionOf(*previous) == "1");
  CHECK(store.ByIndex("role", "worker").size() == 1);
  CHECK(store.ByIndex("role", "dispatcher").size() == 2);
  CHECK(store.Remove("a/p1") != nullptr);
  CHECK(store.Remove("a/p1") == nullptr);
  CHECK(store.ByIndex("role", "dispatcher").size() == 1);
  CHECK(store.ByIndex("owner", "u1").size() == 1);
}

TEST_CASE("store ByIndexes answers several lookups from one state, also while a writer moves objects") {
  Store store;
  REQUIRE(store.AddIndex("role", IndexByLabel("role")).ok());
  store.Upsert(Pod("a", "p", "1", "worker"));
  store.Upsert(Pod("a", "q", "1", "dispatcher"));
  std::vector<std::vector<ObjectPtr>> got =
      store.ByIndexes({{"role", "worker"}, {"role", "dispatcher"}, {"nope", "x"}, {"role", "none"}});
  REQUIRE(got.size() == 4);
  CHECK(got[0].size() == 1);
  CHECK(NameOf(*got[0][0]) == "p");
  CHECK(got[1].size() == 1);
  CHECK(got[2].empty());
  CHECK(got[3].empty());

  // A writer flips "p" between the two roles; every combined read sees it in exactly one of them.
  // 2000 lookups of absent values between the two make the read long, so that separate ByIndex
  // calls would see "p" in neither or in both in most reads.
  const ObjectPtr versions[2] = {Pod("a", "p", "2", "worker"), Pod("a", "p", "3", "dispatcher")};
  std::vector<std::pair<std::string, std::string>> lookups = {{"role", "worker"}};
  for (int i = 0; i < 2000; ++i) lookups.emplace_back("role", "absent-" + std::to_string(i));
  lookups.emplace_back("role", "dispatcher");
  std::atomic<bool> stop{false};
  std::atomic<int64_t> flips{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      store.Upsert(versions[i % 2]);
      flips.fetch_add(1);
    }
  });
  int inconsistent = 0, reads = 0;
  // Until the writer has moved "p" many times while we read (a count, not a time limit).
  while (reads < 200 || flips.load() < 20000) {
    std::vector<std::vector<ObjectPtr>> both = store.ByIndexes(lookups);
    if (both.front().size() + both.back().size() != 2) ++inconsistent;
    ++reads;
  }
  stop = true;
  writer.join();
  INFO(reads << " reads, " << flips.load() << " moves");
  CHECK(inconsistent == 0);
}

TEST_CASE("store Replace reports added / updated and deleted - index added late covers old objects") {
  Store store;
  store.Upsert(Pod("a", "keep", "1", "w"));
  store.Upsert(Pod("a", "change", "1", "w"));
  store.Upsert(Pod("a", "gone", "1", "w"));
  ReplaceDelta delta = store.Replace({Pod("a", "keep", "1", "w"), Pod("a", "change", "2", "w"), Pod("a", "new", "1", "x")});
  REQUIRE(delta.added.size() == 1);
  CHECK(NameOf(*delta.added[0]) == "new");
  REQUIRE(delta.updated.size() == 1);
  CHECK(ResourceVersionOf(*delta.updated[0].first) == "1");
  CHECK(ResourceVersionOf(*delta.updated[0].second) == "2");
  REQUIRE(delta.deleted.size() == 1);
  CHECK(NameOf(*delta.deleted[0]) == "gone");
  CHECK(store.Keys() == std::vector<std::string>{"a/change", "a/keep", "a/new"});
  REQUIRE(store.AddIndex("role", IndexByLabel("role")).ok());
  CHECK(store.ByIndex("role", "w").size() == 2);
  CHECK(store.ByIndex("role", "x").size() == 1);
}

TEST_CASE("cluster-scoped objects are keyed by name") {
  Store store;
  store.Upsert(std::make_shared<const json>(json{{"metadata", {{"name", "node-1"}}}}));
  CHECK(store.Get("node-1") != nullptr);
  CHECK(SplitObjectKey("node-1") == std::pair<std::string, std::string>{"", "node-1"});
  CHECK(SplitObjectKey("ns/x") == std::pair<std::string, std::string>{"ns", "x"});
}

}  // namespace
}  // namespace sluice::kube
