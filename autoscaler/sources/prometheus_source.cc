#include "autoscaler/sources/prometheus_source.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace sluice::autoscaler {

using json = nlohmann::json;

namespace {

// Templates: $BY is "" per DataService or "by (<labels>) " batched; $SEL the series selector; $W the window.
const std::map<std::string, std::string>& Templates() {
  static const auto* t = new std::map<std::string, std::string>{
      {"stallRatio",
       "sum $BY(rate(sluice_client_wait_seconds_total{$SEL}[$W])) / sum $BY(rate(sluice_client_step_seconds_total{$SEL}[$W]))"},
      {"demand", "sum $BY(rate(sluice_client_elements_total{$SEL}[$W]))"},
      {"supply", "sum $BY(rate(sluice_worker_elements_produced_total{$SEL}[$W]))"},
      {"workerCpu", "sum $BY(rate(sluice_worker_busy_seconds_total{$SEL}[$W]))"},
      {"computePerElement",
       "(sum $BY(rate(sluice_client_step_seconds_total{$SEL}[$W])) - sum $BY(rate(sluice_client_wait_seconds_total{$SEL}[$W]))) "
       "/ sum $BY(rate(sluice_client_elements_total{$SEL}[$W]))"},
      {"buffered", "sum $BY(sluice_worker_buffered_elements{$SEL})"},
      {"churn",
       "sum $BY(increase(sluice_dispatcher_worker_removals_total{$SEL,reason=\"heartbeat timeout\"}[$W])) "
       "or 0 * sum $BY(sluice_dispatcher_workers{$SEL})"},
      {"workers", "sum $BY(sluice_dispatcher_workers{$SEL})"},
      {"localWorkers",
       "sum $BY(sluice_dispatcher_workers{$SEL,placement=\"local\"}) or 0 * sum $BY(sluice_dispatcher_workers{$SEL})"},
      {"freshness", "time() - max $BY(timestamp(sluice_dispatcher_workers{$SEL}))"},
  };
  return *t;
}

std::string Window(absl::Duration w) { return absl::StrCat(absl::ToInt64Seconds(w), "s"); }

std::string Selector(const std::string& ns, const std::string& dataservice, const PrometheusOptions& o) {
  std::string sel = absl::StrCat(o.dataservice_label, "=\"", dataservice, "\"");
  if (!o.namespace_label.empty()) absl::StrAppend(&sel, ",", o.namespace_label, "=\"", ns, "\"");
  return sel;
}

std::string Head(const std::string& body) {
  std::string head = body.substr(0, 120);
  for (char& c : head) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return head;
}

absl::StatusOr<double> ParseValueText(const std::string& s, const std::string& name) {
  if (s == "NaN") return std::nan("");
  if (s == "+Inf" || s == "Inf") return HUGE_VAL;
  if (s == "-Inf") return -HUGE_VAL;
  double d = 0;
  if (!absl::SimpleAtod(s, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("query ", name, ": sample value '", s, "' is not a number"));
  }
  return d;
}

absl::StatusOr<double> ParseValue(const json& v, const std::string& name) {
  if (!v.is_string()) return absl::InvalidArgumentError(absl::StrCat("query ", name, ": a sample value is not a string"));
  return ParseValueText(v.get_ref<const std::string&>(), name);
}

absl::StatusOr<PromSeries> ParseSample(const json& pair, const std::string& name) {
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("query ", name, ": a sample is not [timestamp, \"value\"]: ", Head(pair.dump())));
  }
  PromSeries s;
  s.timestamp = pair[0].get<double>();
  auto v = ParseValue(pair[1], name);
  if (!v.ok()) return v.status();
  s.value = *v;
  return s;
}

// The common answer, read without building a JSON tree (a batched query answers a series per
// DataService: a thousand of them per query, ten queries per snapshot): {"status": "success",
// "data": {"resultType": "vector", "result": [{"metric": {...}, "value": [t, "v"]}, ...]}}, other
// keys ignored as the tree reader ignores them. Anything else (an error, a scalar, a malformed
// sample) makes it give up, and the tree reader answers with its messages.
class VectorSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  // The answer, when the text was the common one.
  std::optional<PromAnswer> Take() {
    if (failed_ || status_ != "success" || type_ != "vector" || !saw_result_) return std::nullopt;
    return std::move(answer_);
  }

  bool null() { return Scalar(); }
  bool boolean(bool) { return Scalar(); }
  bool number_integer(number_integer_t v) { return Number(static_cast<double>(v)); }
  bool number_unsigned(number_unsigned_t v) { return Number(static_cast<double>(v)); }
  bool number_float(number_float_t v, const string_t&) { return Number(v); }
  bool binary(binary_t&) { return Fail(); }
  bool string(string_t& v) {
    switch (Top()) {
      case kTop:
        if (key_ == "status") status_ = v;
        return true;
      case kData:
        if (key_ == "resultType") type_ = v;
        return true;
      case kMetric:
        series_.labels[key_] = v;
        return true;
      case kValue: {
        if (value_index_++ != 1) return Fail();
        auto parsed = ParseValueText(v, "");
        if (!parsed.ok()) return Fail();
        series_.value = *parsed;
        have_value_ = true;
        return true;
      }
      case kResult:
        return Fail();
      default:
        return true;
    }
  }
  bool start_object(std::size_t) {
    const Ctx parent = Top();
    if (stack_.empty()) {
      stack_.push_back(kTop);
    } else if (parent == kTop && key_ == "data") {
      stack_.push_back(kData);
    } else if (parent == kResult) {
      series_ = PromSeries{};
      have_value_ = false;
      stack_.push_back(kItem);
    } else if (parent == kItem && key_ == "metric") {
      stack_.push_back(kMetric);
    } else if (parent == kValue) {
      return Fail();
    } else {
      stack_.push_back(kSkip);
    }
    return true;
  }
  bool end_object() {
    if (Top() == kItem) {
      if (!have_value_) return Fail();
      answer_.series.push_back(std::move(series_));
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    const Ctx parent = Top();
    if (parent == kData && key_ == "result") {
      saw_result_ = true;
      stack_.push_back(kResult);
    } else if (parent == kItem && key_ == "value") {
      value_index_ = 0;
      stack_.push_back(kValue);
    } else if (parent == kResult || parent == kValue || stack_.empty()) {
      return Fail();
    } else {
      stack_.push_back(kSkip);
    }
    return true;
  }
  bool end_array() {
    if (Top() == kValue && value_index_ != 2) return Fail();
    stack_.pop_back();
    return true;
  }
  bool key(string_t& k) {
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return Fail(); }

 private:
  enum Ctx { kNone, kTop, kData, kResult, kItem, kMetric, kValue, kSkip };
  Ctx Top() const { return stack_.empty() ? kNone : stack_.back(); }
  bool Fail() {
    failed_ = true;
    return false;
  }
  bool Scalar() { return Top() == kValue || Top() == kResult || stack_.empty() ? Fail() : true; }
  bool Number(double v) {
    if (Top() == kValue) {
      if (value_index_++ != 0) return Fail();
      series_.timestamp = v;
      return true;
    }
    return Scalar();
  }

  std::vector<Ctx> stack_;
  std::string key_;
  std::string status_, type_;
  bool saw_result_ = false;
  bool failed_ = false;
  PromSeries series_;
  bool have_value_ = false;
  int value_index_ = 0;
  PromAnswer answer_;
};

}  // namespace

const std::vector<std::string>& SignalQueryNames() {
  static const auto* names = new std::vector<std::string>{"stallRatio", "demand", "supply", "workerCpu",
                                                          "computePerElement", "buffered", "churn", "workers",
                                                          "localWorkers", "freshness"};
  return *names;
}

absl::StatusOr<PromAnswer> ParsePromAnswer(const HttpResult& result, const std::string& name, const std::string& url) {
  if (result.status == 200) {
    VectorSax sax;
    if (json::sax_parse(result.body, &sax, json::input_format_t::json, /*strict=*/true)) {
      if (std::optional<PromAnswer> fast = sax.Take()) return *std::move(fast);
    }
  }
  json body = json::parse(result.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    if (result.status == 404) {
      return absl::NotFoundError(absl::StrCat("query ", name, ": ", url,
                                              " has no /api/v1/query (404): give the Prometheus base URL, e.g. "
                                              "http://prometheus.monitoring:9090"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "query ", name, ": the answer from ", url, " (HTTP ", result.status, ", ", result.content_type,
        ") is not Prometheus API JSON — is the URL a Prometheus server? It begins: '", Head(result.body), "'"));
  }
  const std::string status = body.value("status", "");
  if (status != "success") {
    if (status == "error") {
      return absl::InvalidArgumentError(absl::StrCat("query ", name, " failed in Prometheus (HTTP ", result.status,
                                                     ", ", body.value("errorType", "?"), "): ",
                                                     body.value("error", "?")));
    }
    return absl::InvalidArgumentError(absl::StrCat("query ", name, ": the answer from ", url,
                                                   " has no status \"success\" or \"error\": ", Head(result.body)));
  }
  if (result.status != 200) {
    return absl::InvalidArgumentError(absl::StrCat("query ", name, ": HTTP ", result.status, " from ", url));
  }
  const json& data = body.contains("data") ? body["data"] : json();
  if (!data.is_object() || !data.contains("resultType") || !data.contains("result")) {
    return absl::InvalidArgumentError(absl::StrCat("query ", name, ": the answer has no data.resultType/data.result"));
  }
  const std::string type = data["resultType"].is_string() ? data["resultType"].get<std::string>() : "";
  PromAnswer out;
  if (type == "scalar") {
    auto s = ParseSample(data["result"], name);
    if (!s.ok()) return s.status();
    out.series.push_back(*s);
    return out;
  }
  if (type == "string" || type == "matrix") {
    return absl::InvalidArgumentError(absl::StrCat("query ", name, " returned a ", type,
                                                   "; it must return an instant vector with one series per "
                                                   "DataService (a number, e.g. sum(rate(...[1m])))"));
  }
  if (type != "vector" || !data["result"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("query ", name, ": unknown result type '", type, "'"));
  }
  for (const json& item : data["result"]) {
    if (!item.is_object() || !item.contains("value")) {
      return absl::InvalidArgumentError(absl::StrCat("query ", name, ": a vector element has no value"));
    }
    auto s = ParseSample(item["value"], name);
    if (!s.ok()) return s.status();
    if (item.contains("metric") && item["metric"].is_object()) {
      for (auto it = item["metric"].begin(); it != item["metric"].end(); ++it) {
        if (it.value().is_string()) s->labels[it.key()] = it.value().get<std::string>();
      }
    }
    out.series.push_back(std::move(*s));
  }
  return out;
}

absl::StatusOr<Measurement> SingleValue(const PromAnswer& answer, const std::string& name) {
  if (answer.series.empty()) return Measurement::Missing("no series");
  if (answer.series.size() > 1) {
    std::vector<std::string> shown;
    for (size_t i = 0; i < answer.series.size() && i < 3; ++i) {
      std::vector<std::string> labels;
      for (const auto& [k, v] : answer.series[i].labels) labels.push_back(absl::StrCat(k, "=\"", v, "\""));
      shown.push_back(absl::StrCat("{", absl::StrJoin(labels, ","), "}"));
    }
    return absl::InvalidArgumentError(absl::StrCat("query ", name, " returned ", answer.series.size(), " series (",
                                                   absl::StrJoin(shown, ", "),
                                                   answer.series.size() > 3 ? ", ..." : "",
                                                   "); it must return one: aggregate it, e.g. sum(...)"));
  }
  return Measurement::Of(answer.series[0].value);
}

std::string QueryFor(const std::string& name, const std::map<std::string, std::string>& overrides,
                     const std::string& ns, const std::string& dataservice, const PrometheusOptions& options) {
  auto it = overrides.find(name);
  if (it != overrides.end()) {
    return absl::StrReplaceAll(it->second, {{"{{dataservice}}", dataservice},
                                            {"{{namespace}}", ns},
                                            {"{{window}}", Window(options.window)},
                                            {"{{selector}}", Selector(ns, dataservice, options)}});
  }
  return absl::StrReplaceAll(Templates().at(name), {{"$BY", ""},
                                                    {"$SEL", Selector(ns, dataservice, options)},
                                                    {"$W", Window(options.window)}});
}

std::string BatchedQuery(const std::string& name, const PrometheusOptions& options) {
  std::string by = options.namespace_label.empty()
                       ? absl::StrCat("by (", options.dataservice_label, ") ")
                       : absl::StrCat("by (", options.namespace_label, ", ", options.dataservice_label, ") ");
  return absl::StrReplaceAll(Templates().at(name), {{"$BY", by},
                                                    {"$SEL", absl::StrCat(options.dataservice_label, "!=\"\"")},
                                                    {"$W", Window(options.window)}});
}

Signals SignalsFromValues(const std::map<std::string, Measurement>& values, absl::Time now, absl::Duration window) {
  auto get = [&values](const char* name) {
    auto it = values.find(name);
    return it == values.end() ? Measurement::Missing("not queried") : it->second;
  };
  Signals s;
  s.window = window;
  Measurement freshness = get("freshness");
  s.at = freshness.known() ? now - absl::Seconds(std::max(0.0, *freshness)) : now;
  s.stall_ratio = get("stallRatio");
  s.demand = get("demand");
  s.supply = get("supply");
  s.worker_cpu = get("workerCpu");
  s.compute_per_element = get("computePerElement");
  s.buffered = get("buffered");
  s.churn = get("churn");
  s.workers = get("workers");
  s.local_workers = get("localWorkers");
  if (!freshness.known()) {
    const std::string why = absl::StrCat("the dispatcher's metrics are not there (freshness: ", freshness.missing, ")");
    for (Measurement* m : {&s.stall_ratio, &s.demand, &s.supply, &s.worker_cpu, &s.compute_per_element, &s.buffered,
                           &s.churn, &s.workers, &s.local_workers}) {
      *m = Measurement::Missing(why);
    }
  }
  return s;
}

PrometheusSource::PrometheusSource(PrometheusOptions options) : options_(std::move(options)) {}
PrometheusSource::~PrometheusSource() = default;

int64_t PrometheusSource::queries_sent() const {
  absl::MutexLock lock(&mu_);
  return queries_sent_;
}

absl::StatusOr<const HttpFetcher*> PrometheusSource::FetcherFor(const std::string& url) {
  absl::MutexLock lock(&mu_);
  auto it = fetchers_.find(url);
  if (it != fetchers_.end()) return it->second.get();
  auto created = HttpFetcher::Create(url, options_.auth);  // no I/O: reads the auth files only
  if (!created.ok()) return created.status();
  const HttpFetcher* raw = created->get();
  fetchers_[url] = *std::move(created);
  return raw;
}

absl::StatusOr<PromAnswer> PrometheusSource::Query(const HttpFetcher& fetcher, const std::string& name,
                                                   const std::string& promql) {
  {
    absl::MutexLock lock(&mu_);
    ++queries_sent_;
  }
  auto result = fetcher.Get(absl::StrCat("/api/v1/query?query=", UrlEncode(promql)));
  if (!result.ok()) return result.status();
  return ParsePromAnswer(*result, name, fetcher.base_url());
}

std::shared_ptr<PrometheusSource::Snapshot> PrometheusSource::TakeSnapshot(const std::string& url, absl::Time now) {
  auto snap = std::make_shared<Snapshot>();
  snap->taken = now;
  auto fetcher = FetcherFor(url);
  for (const std::string& name : SignalQueryNames()) {
    if (!fetcher.ok()) {
      snap->errors[name] = std::string(fetcher.status().message());
      continue;
    }
    auto answer = Query(**fetcher, name, BatchedQuery(name, options_));
    if (!answer.ok()) {
      snap->errors[name] = std::string(answer.status().message());
      continue;
    }
    auto& by_ds = snap->values[name];
    for (const PromSeries& s : answer->series) {
      auto ds = s.labels.find(options_.dataservice_label);
      if (ds == s.labels.end()) continue;
      std::string ns;
      if (!options_.namespace_label.empty()) {
        auto n = s.labels.find(options_.namespace_label);
        if (n == s.labels.end()) continue;
        ns = n->second;
      }
      by_ds[{ns, ds->second}] = Measurement::Of(s.value);
    }
  }
  return snap;
}

std::shared_ptr<const PrometheusSource::Snapshot> PrometheusSource::SnapshotFor(const std::string& url,
                                                                               absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    auto fresh = [&] {
      mu_.AssertHeld();  // Await evaluates the condition under mu_
      auto it = snapshots_.find(url);
      auto busy = fetching_.find(url);
      return (it != snapshots_.end() && now - it->second->taken < options_.cache_for) || busy == fetching_.end() ||
             !busy->second;
    };
    mu_.Await(absl::Condition(&fresh));
    auto it = snapshots_.find(url);
    if (it != snapshots_.end() && now - it->second->taken < options_.cache_for) return it->second;
    fetching_[url] = true;
  }
  std::shared_ptr<Snapshot> snap = TakeSnapshot(url, now);  // no lock held across the queries
  absl::MutexLock lock(&mu_);
  snapshots_[url] = snap;
  fetching_[url] = false;
  return snap;
}

Observation PrometheusSource::Observe(const PrometheusTarget& target, absl::Time now) {
  Observation out;
  std::map<std::string, Measurement> values;
  std::shared_ptr<const Snapshot> snap;
  for (const std::string& name : SignalQueryNames()) {
    if (target.overrides.count(name) > 0) {
      auto fetcher = FetcherFor(target.url);
      if (!fetcher.ok()) {
        out.errors.push_back(std::string(fetcher.status().message()));
        values[name] = Measurement::Missing("no Prometheus");
        continue;
      }
      auto answer = Query(**fetcher, name, QueryFor(name, target.overrides, target.ns, target.dataservice, options_));
      absl::StatusOr<Measurement> m = answer.ok() ? SingleValue(*answer, name) : answer.status();
      if (!m.ok()) {
        out.errors.push_back(std::string(m.status().message()));
        values[name] = Measurement::Missing(absl::StrCat("query ", name, " failed"));
      } else {
        values[name] = *m;
      }
      continue;
    }
    if (!snap) snap = SnapshotFor(target.url, now);
    auto err = snap->errors.find(name);
    if (err != snap->errors.end()) {
      out.errors.push_back(err->second);
      values[name] = Measurement::Missing(absl::StrCat("query ", name, " failed"));
      continue;
    }
    values[name] = Measurement::Missing("no series");
    if (auto by_ds = snap->values.find(name); by_ds != snap->values.end()) {
      if (auto it = by_ds->second.find({target.ns, target.dataservice}); it != by_ds->second.end()) {
        values[name] = it->second;
      }
    }
  }
  out.signals = SignalsFromValues(values, now, options_.window);
  return out;
}

}  // namespace sluice::autoscaler
