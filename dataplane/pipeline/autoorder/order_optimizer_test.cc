// The search on synthetic segments: every order it returns is legal (no non-commuting pair
// swapped), the dynamic program finds the cheapest legal order (checked against brute force), the
// greedy search stays legal on long segments, and the cost model scales as documented.
#include "dataplane/pipeline/autoorder/order_optimizer.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace sluice::pipeline::autoorder {
namespace {

const std::vector<std::string> kFields = {"a", "b", "c", "d"};

// A random unit: reads/writes some fields (or, as a filter, reads one and may drop), declares a few
// random commutations with other synthetic ops. Shapes and dtypes stay the same, so the model's
// state after a set of units does not depend on their order and the dynamic program is exact.
OrderProperties RandomUnit(std::mt19937_64& rng, size_t index, size_t ops, bool* filter) {
  auto d = std::make_shared<OrderDeclaration>();
  *filter = rng() % 4 == 0;
  const std::string field = kFields[rng() % kFields.size()];
  d->reads.push_back(FieldRef::Named(field));
  if (*filter) {
    d->may_drop = true;
    d->cost = CostDriver::kConstant;
  } else {
    d->writes.push_back(FieldRef::Named(field));
    if (rng() % 3 == 0) d->reads.push_back(FieldRef::Named(kFields[rng() % kFields.size()]));
    d->cost = rng() % 2 == 0 ? CostDriver::kInput : CostDriver::kConstant;
    for (size_t o = 0; o < ops; ++o) {
      if (rng() % 3 == 0) d->commutes.push_back(CommuteRule{absl::StrCat("op", o), rng() % 2 == 0, 0.5, "", nullptr});
    }
  }
  auto p = ResolveOrderProperties(absl::StrCat("op", index % ops), d, false, ValueMap());
  REQUIRE(p.ok());
  return *p;
}

SegmentModel RandomModel(std::mt19937_64& rng, size_t n) {
  SegmentModel m;
  std::uniform_real_distribution<double> size(1, 1000), cpu(1, 100), keep(0.2, 1.0);
  for (const auto& f : kFields) m.input[f] = FieldSize{size(rng), 1};
  for (size_t i = 0; i < n; ++i) {
    bool filter = false;
    m.units.push_back(RandomUnit(rng, i, 5, &filter));
    UnitProfile p;
    p.cpu_ns = cpu(rng);
    p.keep = filter ? keep(rng) : 1.0;
    p.in = m.input;
    p.out = m.input;
    m.profiles.push_back(p);
  }
  return m;
}

TEST_CASE("the dynamic program finds the cheapest legal order (brute force agrees) and never breaks a dependency") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = 2 + trial % 6;
    SegmentModel m = RandomModel(rng, n);
    for (Exactness e : {Exactness::kExactOnly, Exactness::kApproximateToo}) {
      const auto before = MustStayBefore(m.units, e);
      OrderChoice choice = FindBestOrder(m, e, 0.0);
      INFO("trial " << trial);
      REQUIRE(IsLegalOrder(before, choice.order));
      CHECK(choice.exhaustive);
      std::vector<size_t> perm(n);
      std::iota(perm.begin(), perm.end(), 0);
      double best = PredictCost(m, perm);
      do {
        if (IsLegalOrder(before, perm)) best = std::min(best, PredictCost(m, perm));
      } while (std::next_permutation(perm.begin(), perm.end()));
      CHECK(choice.cost == Approx(best).epsilon(1e-9));
      CHECK(choice.cost <= choice.original_cost + 1e-9);
    }
  }
}

TEST_CASE("the greedy search on long segments returns legal orders no worse than the one written") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    SegmentModel m = RandomModel(rng, kMaxExactUnits + 1 + trial % 5);
    OrderChoice choice = FindBestOrder(m, Exactness::kApproximateToo, 0.0);
    CHECK_FALSE(choice.exhaustive);
    CHECK(IsLegalOrder(MustStayBefore(m.units, Exactness::kApproximateToo), choice.order));
    CHECK(choice.cost <= choice.original_cost + 1e-9);
  }
}

TEST_CASE("strict mode never swaps an approximately commuting pair, relaxed mode may") {
  auto a = std::make_shared<OrderDeclaration>();
  a->reads = a->writes = {FieldRef::Named("x")};
  a->commutes = {CommuteRule{"shrink", false, 0.5, "", nullptr}};
  auto b = std::make_shared<OrderDeclaration>();
  b->reads = b->writes = {FieldRef::Named("x")};
  b->shape = ShapeEffect::kFixed;
  std::vector<OrderProperties> units = {*ResolveOrderProperties("widen", a, false, ValueMap()),
                                        *ResolveOrderProperties("shrink", b, false, ValueMap())};
  CHECK(MustStayBefore(units, Exactness::kExactOnly)[0][1]);
  CHECK_FALSE(MustStayBefore(units, Exactness::kApproximateToo)[0][1]);
}

TEST_CASE("the cost model: a widening op moved after a shrinking one costs in proportion to the bytes it then sees") {
  // widen: uint8 -> float32 (4x the bytes), cost grows with its input; shrink: a crop to 100 values,
  // cost grows with its output. Measured as written: widen saw 10000 one-byte values (100 us),
  // shrink saw 10000 four-byte values and wrote 100 four-byte values (20 us).
  auto widen = std::make_shared<OrderDeclaration>();
  widen->reads = widen->writes = {FieldRef::Named("x")};
  widen->dtype = DTypeEffect::Fixed(DType::kFloat32);
  widen->cost = CostDriver::kInput;
  widen->commutes = {CommuteRule{"shrink", true, 0, "", nullptr}};
  auto shrink = std::make_shared<OrderDeclaration>();
  shrink->reads = shrink->writes = {FieldRef::Named("x")};
  shrink->shape = ShapeEffect::kFixed;
  shrink->cost = CostDriver::kOutput;
  SegmentModel m;
  m.units = {*ResolveOrderProperties("widen", widen, false, ValueMap()),
             *ResolveOrderProperties("shrink", shrink, false, ValueMap())};
  m.input["x"] = FieldSize{10000, 1};
  UnitProfile w;
  w.cpu_ns = 100000;
  w.in["x"] = FieldSize{10000, 1};
  w.out["x"] = FieldSize{10000, 4};
  UnitProfile s;
  s.cpu_ns = 20000;
  s.in["x"] = FieldSize{10000, 4};
  s.out["x"] = FieldSize{100, 4};
  m.profiles = {w, s};
  std::vector<double> per_unit;
  CHECK(PredictCost(m, {0, 1}) == Approx(120000));
  // Swapped: shrink writes 100 one-byte values (a quarter of the bytes: 5 us); widen then sees 100
  // one-byte values instead of 10000 (1 us).
  CHECK(PredictCost(m, {1, 0}, &per_unit) == Approx(6000));
  CHECK(per_unit[0] == Approx(1000));
  CHECK(per_unit[1] == Approx(5000));
  OrderChoice choice = FindBestOrder(m, Exactness::kExactOnly, 0.03);
  CHECK(choice.order == std::vector<size_t>{1, 0});
  CHECK(choice.original_cost / choice.cost == Approx(20));
}

TEST_CASE("the cost model: a length filter moved before tokenize saves the long documents' tokenizing") {
  // As measured (text classification): tokenize(text -> tokens) 10 us per document of 1225 bytes;
  // then a filter on the text's length keeps 83% of the documents, averaging 839 bytes.
  auto tokenize = std::make_shared<OrderDeclaration>();
  tokenize->reads = {FieldRef::Named("text")};
  tokenize->writes = {FieldRef::Named("tokens")};
  tokenize->shape = ShapeEffect::kData;
  tokenize->dtype = DTypeEffect::Fixed(DType::kInt64);
  SegmentModel m;
  m.units = {*ResolveOrderProperties("tokenize", tokenize, false, ValueMap()),
             *ResolveOrderProperties("filter", FilterOrderDeclaration(), false, [] {
               ValueMap args;
               SetArg(args, "field", StringValue("text"));
               return args;
             }())};
  m.input = {{"text", FieldSize{1225, 1}}, {"label", FieldSize{1, 8}}};
  UnitProfile t;
  t.cpu_ns = 10000;
  t.in = m.input;
  t.out = {{"text", FieldSize{1225, 1}}, {"label", FieldSize{1, 8}}, {"tokens", FieldSize{194, 8}}};
  UnitProfile f;
  f.cpu_ns = 50;
  f.keep = 0.83;
  f.in = t.out;
  f.out = {{"text", FieldSize{839, 1}}, {"label", FieldSize{1, 8}}, {"tokens", FieldSize{132, 8}}};
  m.profiles = {t, f};
  std::vector<double> per_unit;
  CHECK(PredictCost(m, {0, 1}) == Approx(10050));
  // Filter first: tokenize sees 83% of the documents, 839 bytes on average (the filter dropped the
  // long ones), and no `tokens` field yet (the filter does not make one).
  CHECK(PredictCost(m, {1, 0}, &per_unit) == Approx(50 + 10000 * 0.83 * 839.0 / 1225.0));
  OrderChoice choice = FindBestOrder(m, Exactness::kExactOnly, 0.03);
  CHECK(choice.order == std::vector<size_t>{1, 0});
}

}  // namespace
}  // namespace sluice::pipeline::autoorder
