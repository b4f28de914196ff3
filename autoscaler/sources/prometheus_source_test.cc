#include "autoscaler/sources/prometheus_source.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/admin_server.h"

namespace sluice::autoscaler {
namespace {

HttpResult Json(const std::string& body, int status = 200) { return {status, "application/json", body}; }

std::string Vector(const std::string& items) {
  return R"({"status":"success","data":{"resultType":"vector","result":[)" + items + "]}}";
}

TEST_CASE("Prometheus answers: vectors, scalars, empty, NaN and infinities") {
  auto one = ParsePromAnswer(Json(Vector(R"({"metric":{"dataservice":"a"},"value":[1700000000.5,"12.5"]})")), "demand",
                             "http://p");
  REQUIRE(one.ok());
  auto v = SingleValue(*one, "demand");
  REQUIRE(v.ok());
  CHECK(*v->value == Approx(12.5));

  auto scalar = ParsePromAnswer(Json(R"({"status":"success","data":{"resultType":"scalar","result":[1,"3"]}})"),
                                "workers", "http://p");
  REQUIRE(scalar.ok());
  CHECK(*SingleValue(*scalar, "workers")->value == 3);

  auto empty = ParsePromAnswer(Json(Vector("")), "demand", "http://p");
  REQUIRE(empty.ok());
  auto missing = SingleValue(*empty, "demand");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->known());
  CHECK(missing->missing == "no series");

  for (const char* text : {"NaN", "+Inf", "-Inf"}) {
    auto a = ParsePromAnswer(Json(Vector(std::string(R"({"metric":{},"value":[1,")") + text + "\"]}")), "stallRatio",
                             "http://p");
    REQUIRE(a.ok());
    auto m = SingleValue(*a, "stallRatio");
    REQUIRE(m.ok());
    INFO(text);
    CHECK_FALSE(m->known());  // unknown, never zero
  }
}

TEST_CASE("Prometheus answers: a batched vector with keys the reader ignores, read series by series") {
  // As a real server may answer: warnings, stats, labels of other types, keys inside a series.
  std::string items;
  for (int i = 0; i < 300; ++i) {
    if (i > 0) items += ",";
    items += R"({"metric":{"namespace":"ml","dataservice":"ds-)" + std::to_string(i) +
             R"(","le":{"nested":[1,2]},"n":7},"extra":[{"x":null}],"value":[1700000000.25,")" +
             (i == 7 ? std::string("NaN") : std::to_string(i) + ".5") + R"("]})";
  }
  const std::string body = R"({"status":"success","warnings":["w"],"data":{"resultType":"vector","stats":{"a":[1,{"b":true}]},"result":[)" +
                           items + "]},\"infos\":[]}";
  auto a = ParsePromAnswer(Json(body), "demand", "http://p");
  REQUIRE(a.ok());
  REQUIRE(a->series.size() == 300);
  CHECK(a->series[3].labels.at("dataservice") == "ds-3");
  CHECK(a->series[3].labels.at("namespace") == "ml");
  CHECK(a->series[3].labels.count("n") == 0);  // not a string: no label
  CHECK(a->series[3].value == Approx(3.5));
  CHECK(a->series[3].timestamp == Approx(1700000000.25));
  CHECK(std::isnan(a->series[7].value));
  // A malformed series anywhere is still named (the full reader's message).
  auto bad = ParsePromAnswer(Json(Vector(R"({"metric":{},"value":[1,"2"]},{"metric":{},"value":[1,2]})")), "demand",
                             "http://p");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("not a string") != std::string::npos);
  auto nov = ParsePromAnswer(Json(Vector(R"({"metric":{}})")), "demand", "http://p");
  REQUIRE_FALSE(nov.ok());
  CHECK(std::string(nov.status().message()).find("has no value") != std::string::npos);
}

TEST_CASE("Prometheus answers that are errors name the query and say what to do") {
  struct Row {
    HttpResult result;
    const char* expect;
  };
  const Row rows[] = {
      {{200, "text/html", "<!doctype html><html>Grafana</html>"}, "is not Prometheus API JSON"},
      {{404, "text/plain", "404 page not found"}, "has no /api/v1/query"},
      {Json(R"({"status":"error","errorType":"bad_data","error":"parse error at char 5"})", 400),
       "failed in Prometheus (HTTP 400, bad_data): parse error at char 5"},
      {Json(R"({"status":"success","data":{"resultType":"string","result":[1,"x"]}})"), "returned a string"},
      {Json(R"({"status":"success","data":{"resultType":"matrix","result":[]}})"), "returned a matrix"},
      {Json(R"({"status":"success"})"), "no data.resultType"},
      {Json(Vector(R"({"metric":{},"value":[1,"twelve"]})")), "is not a number"},
      {Json(Vector(R"({"metric":{},"value":"12"})")), "is not [timestamp"},
      {Json(R"({"hello":"world"})"), "no status"},
      {Json("[1,2,3]"), "is not Prometheus API JSON"},
  };
  for (const Row& r : rows) {
    auto a = ParsePromAnswer(r.result, "demand", "http://prom:9090");
    INFO(r.result.body);
    REQUIRE_FALSE(a.ok());
    CHECK_THAT(std::string(a.status().message()), Catch::Contains(r.expect));
    CHECK_THAT(std::string(a.status().message()), Catch::Contains("demand"));
  }
  auto several = ParsePromAnswer(Json(Vector(R"({"metric":{"job":"a"},"value":[1,"1"]},{"metric":{"job":"b"},"value":[1,"2"]})")),
                                 "demand", "http://p");
  REQUIRE(several.ok());
  auto v = SingleValue(*several, "demand");
  REQUIRE_FALSE(v.ok());
  CHECK_THAT(std::string(v.status().message()), Catch::Contains("returned 2 series ({job=\"a\"}, {job=\"b\"})"));
  CHECK_THAT(std::string(v.status().message()), Catch::Contains("aggregate it"));
}

TEST_CASE("queries: defaults per DataService, batched, and overrides with placeholders") {
  PrometheusOptions o;
  o.window = absl::Minutes(1);
  CHECK(QueryFor("demand", {}, "ml", "mnist", o) ==
        "sum (rate(sluice_client_elements_total{dataservice=\"mnist\",namespace=\"ml\"}[60s]))");
  CHECK(BatchedQuery("demand", o) ==
        "sum by (namespace, dataservice) (rate(sluice_client_elements_total{dataservice!=\"\"}[60s]))");
  CHECK(QueryFor("demand", {{"demand", "sum(rate(my_batches_total{app=\"{{dataservice}}\",ns=\"{{namespace}}\"}[{{window}}]))"}},
                 "ml", "mnist", o) == "sum(rate(my_batches_total{app=\"mnist\",ns=\"ml\"}[60s]))");
  CHECK(QueryFor("workers", {{"workers", "count(up{ {{selector}} })"}}, "ml", "mnist", o) ==
        "count(up{ dataservice=\"mnist\",namespace=\"ml\" })");
  o.namespace_label = "";
  CHECK(BatchedQuery("workers", o) == "sum by (dataservice) (sluice_dispatcher_workers{dataservice!=\"\"})");
  for (const std::string& name : SignalQueryNames()) CHECK_FALSE(BatchedQuery(name, o).empty());
}

TEST_CASE("signals from values: freshness sets the time, without it nothing is known") {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::map<std::string, Measurement> v = {{"freshness", Measurement::Of(12)}, {"demand", Measurement::Of(40)},
                                          {"stallRatio", Measurement::Of(0.2)}};
  Signals s = SignalsFromValues(v, now, absl::Minutes(1));
  CHECK(s.at == now - absl::Seconds(12));
  CHECK(*s.demand.value == 40);
  CHECK_FALSE(s.supply.known());
  CHECK(s.supply.missing == "not queried");
  v.erase("freshness");
  Signals blind = SignalsFromValues(v, now, absl::Minutes(1));
  CHECK_FALSE(blind.demand.known());
  CHECK_THAT(blind.demand.missing, Catch::Contains("the dispatcher's metrics are not there"));
}

TEST_CASE("a URL that is not Prometheus (a daemon's admin endpoint) or nothing at all: errors, all unknown") {
  auto admin = AdminServer::Start("127.0.0.1:0", std::make_shared<prometheus::Registry>());
  REQUIRE(admin.ok());
  PrometheusOptions o;
  o.auth.timeout = absl::Seconds(5);
  PrometheusSource source(o);
  Observation obs = source.Observe({"http://127.0.0.1:" + std::to_string((*admin)->port()), "ml", "mnist", {}},
                                   absl::FromUnixSeconds(1'800'000'000));
  REQUIRE_FALSE(obs.errors.empty());
  CHECK_THAT(obs.errors[0], Catch::Contains("/api/v1/query"));
  CHECK_FALSE(obs.signals.demand.known());
  CHECK_FALSE(obs.signals.stall_ratio.known());

  // A port nothing listens on (the admin server's, once it is gone).
  const int port = (*admin)->port();
  admin->reset();
  PrometheusSource down(o);
  Observation none = down.Observe({"http://127.0.0.1:" + std::to_string(port), "ml", "mnist", {}},
                                  absl::FromUnixSeconds(1'800'000'000));
  REQUIRE_FALSE(none.errors.empty());
  CHECK_THAT(none.errors[0], Catch::Contains("127.0.0.1"));
  CHECK_FALSE(none.signals.workers.known());

  PrometheusSource bad(o);
  Observation scheme = bad.Observe({"prometheus:9090", "ml", "mnist", {}}, absl::FromUnixSeconds(1'800'000'000));
  REQUIRE_FALSE(scheme.errors.empty());
  CHECK_THAT(scheme.errors[0], Catch::Contains("must start with http://"));
}

}  // namespace
}  // namespace sluice::autoscaler
