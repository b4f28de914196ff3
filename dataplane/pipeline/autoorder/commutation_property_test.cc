// Property tests of every commutation the built-in ops declare: for each pair of op instances that
// Commute() lets swap, applying them in either order to random images gives identical output
// (exact) or output within the declared tolerance (approximate). Every declared rule must be
// exercised by at least one pair here, so a new declaration without a test fails.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/op_properties.h"

namespace sluice::pipeline {
namespace {

Value Str(std::string s) { return StringValue(std::move(s)); }
Value Num(double v) { return FloatValue(v); }
Value Ints(std::vector<int64_t> v) {
  Value out;
  for (int64_t x : v) *out.mutable_list_value()->add_values() = IntValue(x);
  return out;
}
Value Floats(std::vector<double> v) {
  Value out;
  for (double x : v) *out.mutable_list_value()->add_values() = FloatValue(x);
  return out;
}

// One op instance: its name, validated arguments, properties and the op itself.
struct Instance {
  std::string label;
  std::string op;
  std::shared_ptr<ValueMap> args;
  OrderProperties props;
  std::unique_ptr<ElementOp> impl;
};

Instance Make(const std::string& op, std::vector<std::pair<std::string, Value>> args) {
  const OpDescriptor* d = OpRegistry::Builtin().Find(op);
  REQUIRE(d != nullptr);
  Instance in;
  in.op = op;
  in.args = std::make_shared<ValueMap>();
  in.label = op;
  for (auto& [k, v] : args) {
    SetArg(*in.args, k, v);
    absl::StrAppend(&in.label, " ", k, "=", ValueToString(v));
  }
  REQUIRE(ValidateArgs(d->args, *in.args, op).ok());
  auto props = ResolveOrderProperties(op, d->order, d->random, *in.args);
  REQUIRE(props.ok());
  in.props = *props;
  auto impl = d->factory(Args(*in.args));
  REQUIRE(impl.ok());
  in.impl = *std::move(impl);
  return in;
}

// Every op works on field "image"; the variants cover each rule's conditions both ways.
std::vector<Instance> Variants() {
  std::vector<Instance> v;
  const Value image = Str("image");
  v.push_back(Make("cast", {{"field", image}, {"dtype", Str("float32")}, {"scale", Num(1.0 / 255)}}));
  v.push_back(Make("cast", {{"field", image}, {"dtype", Str("float32")}, {"scale", Num(2.0)}}));
  v.push_back(Make("cast", {{"field", image}, {"dtype", Str("float32")}, {"scale", Num(-1.0)}}));
  v.push_back(Make("cast", {{"field", image}, {"dtype", Str("int16")}}));
  v.push_back(Make("normalize", {{"layout", Str("hwc")}, {"mean", Floats({0.485, 0.456, 0.406})},
                                 {"std", Floats({0.229, 0.224, 0.225})}}));
  v.push_back(Make("normalize", {{"layout", Str("hwc")}, {"mean", Floats({0})}, {"std", Floats({0.5})}}));
  v.push_back(Make("normalize", {{"layout", Str("chw")}}));
  v.push_back(Make("resize", {{"size", Ints({20, 24})}}));
  v.push_back(Make("resize", {{"size", Ints({70, 50})}, {"method", Str("area")}}));
  v.push_back(Make("resize", {{"size", Ints({16, 16})}, {"method", Str("nearest")}}));
  v.push_back(Make("resize", {{"size", Ints({24})}, {"antialias", BoolValue(false)}}));
  v.push_back(Make("random_resized_crop", {{"size", Ints({16, 16})}}));
  v.push_back(Make("random_resized_crop", {{"size", Ints({12, 20})}, {"method", Str("nearest")}}));
  v.push_back(Make("random_flip", {}));
  v.push_back(Make("random_flip", {{"mode", Str("vertical")}, {"probability", Num(0.7)}}));
  v.push_back(Make("random_crop", {{"size", Ints({8, 10})}}));
  v.push_back(Make("center_crop", {{"size", Ints({12, 70})}}));
  v.push_back(Make("reshape", {{"field", image}, {"shape", Ints({-1})}}));
  v.push_back(Make("pad", {{"field", image}, {"length", IntValue(80)}}));
  v.push_back(Make("pad", {{"field", image}, {"length", IntValue(80)}, {"value", Num(3)}}));
  v.push_back(Make("truncate", {{"field", image}, {"length", IntValue(10)}}));
  v.push_back(Make("pad_or_truncate", {{"field", image}, {"length", IntValue(30)}}));
  return v;
}

Element RandomImage(std::mt19937_64& rng) {
  const int64_t h = 20 + static_cast<int64_t>(rng() % 41);
  const int64_t w = 20 + static_cast<int64_t>(rng() % 41);
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape{h, w, 3});
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xFF);
  Element e;
  e.Set("image", std::move(t));
  e.set_key(rng());
  return e;
}

absl::Status Apply(const Instance& a, uint64_t seed_a, const Instance& b, uint64_t seed_b, Element& e) {
  if (auto s = a.impl->Apply(e, seed_a); !s.ok()) return s;
  return b.impl->Apply(e, seed_b);
}

// Max abs difference, or -1 when dtype or shape differ; `identical` compares bytes.
double MaxDiff(const Tensor& x, const Tensor& y, bool* identical) {
  if (x.dtype() != y.dtype() || x.shape() != y.shape()) return -1;
  *identical = x.nbytes() == y.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
  double m = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) m = std::max(m, std::abs(x.GetAsDouble(i) - y.GetAsDouble(i)));
  return m;
}

std::string PairKey(const std::string& a, const std::string& b) { return a < b ? a + "|" + b : b + "|" + a; }

TEST_CASE("every declared commutation holds on random images, exactly or within its tolerance") {
  std::vector<Instance> variants = Variants();
  std::set<std::string> exercised;
  std::mt19937_64 rng(20240514);
  int pairs = 0;
  for (const Instance& a : variants) {
    for (const Instance& b : variants) {
      if (&a == &b) continue;
      std::optional<Commutation> c = Commute(a.props, b.props);
      if (!c.has_value()) continue;
      ++pairs;
      exercised.insert(PairKey(a.op, b.op));
      int compared = 0;
      for (int trial = 0; trial < 12; ++trial) {
        Element input = RandomImage(rng);
        const uint64_t seed_a = rng(), seed_b = rng();
        Element ab = input, ba = input;
        absl::Status s_ab = Apply(a, seed_a, b, seed_b, ab);
        if (!s_ab.ok()) continue;  // the order as written fails on this input: nothing to preserve
        absl::Status s_ba = Apply(b, seed_b, a, seed_a, ba);
        INFO(a.label << "  then  " << b.label << " (trial " << trial << ")");
        REQUIRE(s_ba.ok());
        bool identical = false;
        const double diff = MaxDiff(*ab.Find("image"), *ba.Find("image"), &identical);
        REQUIRE(diff >= 0);  // same dtype and shape
        if (c->exact) {
          CHECK(identical);
        } else {
          CHECK(diff <= c->tolerance);
        }
        ++compared;
      }
      INFO(a.label << "  then  " << b.label);
      CHECK(compared > 0);
    }
  }
  CHECK(pairs > 20);
  // Every rule some built-in op declares was exercised by a pair above.
  for (const std::string& name : OpRegistry::Builtin().Names()) {
    const OpDescriptor* d = OpRegistry::Builtin().Find(name);
    if (d->order == nullptr) continue;
    for (const CommuteRule& rule : d->order->commutes) {
      INFO("rule " << name << " with " << rule.other);
      CHECK(exercised.count(PairKey(name, rule.other)) == 1);
    }
  }
}

TEST_CASE("rules whose conditions fail do not commute") {
  std::vector<Instance> v = Variants();
  auto find = [&](const std::string& label_part) -> const Instance& {
    for (const auto& i : v) {
      if (i.label.find(label_part) != std::string::npos) return i;
    }
    FAIL("no variant " << label_part);
    return v.front();
  };
  const Instance& chw = find("layout='chw'");
  const Instance& flip = find("random_flip");
  const Instance& center = find("center_crop");
  const Instance& imagenet = find("mean=[0.485");
  const Instance& negative_cast = find("scale=-1");
  const Instance& int_cast = find("dtype='int16'");
  const Instance& bilinear = find("size=[20, 24]");
  const Instance& pad3 = find("value=3");
  CHECK_FALSE(Commute(chw.props, flip.props).has_value());        // chw transposes: flip would mirror the wrong axis
  CHECK_FALSE(Commute(imagenet.props, center.props).has_value()); // center_crop's zero padding would not normalize
  CHECK_FALSE(Commute(negative_cast.props, center.props).has_value());  // -0.0 vs +0.0
  CHECK_FALSE(Commute(int_cast.props, bilinear.props).has_value());     // resampling takes uint8 or float32
  CHECK_FALSE(Commute(find("dtype='float32'").props, pad3.props).has_value());
  // Approximate pairs are approximate, with a tolerance scaled by normalize's gain.
  auto c = Commute(imagenet.props, bilinear.props);
  REQUIRE(c.has_value());
  CHECK_FALSE(c->exact);
  CHECK(c->tolerance == Approx(1.05 / 255 / 0.224 + 1e-5).epsilon(0.01));
}

TEST_CASE("ops on different fields commute exactly, a field dependency does not") {
  const OpDescriptor* cast = OpRegistry::Builtin().Find("cast");
  const OpDescriptor* tokenize = OpRegistry::Builtin().Find("tokenize");
  auto props = [](const OpDescriptor* d, const std::string& op, std::vector<std::pair<std::string, Value>> args) {
    ValueMap m;
    for (auto& [k, v] : args) SetArg(m, k, v);
    auto p = ResolveOrderProperties(op, d->order, d->random, m);
    REQUIRE(p.ok());
    return *p;
  };
  OrderProperties cast_label = props(cast, "cast", {{"field", Str("label")}, {"dtype", Str("int32")}});
  OrderProperties tok = props(tokenize, "tokenize", {{"field", Str("text")}, {"output", Str("tokens")}});
  OrderProperties cast_tokens = props(cast, "cast", {{"field", Str("tokens")}, {"dtype", Str("int32")}});
  OrderProperties filter_text = *ResolveOrderProperties("filter", FilterOrderDeclaration(), false, [] {
    ValueMap m;
    SetArg(m, "field", Str("text"));
    return m;
  }());
  auto c = Commute(cast_label, tok);
  REQUIRE(c.has_value());
  CHECK(c->exact);
  CHECK_FALSE(Commute(tok, cast_tokens).has_value());     // tokenize writes what the cast reads
  CHECK(Commute(tok, filter_text).has_value());           // both only read `text`
  CHECK(Commute(filter_text, cast_tokens).has_value());
  OrderProperties barrier = *ResolveOrderProperties("old_plugin_op", nullptr, false, ValueMap());
  CHECK_FALSE(Commute(barrier, cast_label).has_value());  // undeclared: a barrier, even on other fields
  CHECK_FALSE(Commute(cast_label, barrier).has_value());
}

}  // namespace
}  // namespace sluice::pipeline
