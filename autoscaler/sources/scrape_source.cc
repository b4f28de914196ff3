#include "autoscaler/sources/scrape_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::autoscaler {

namespace {

// Increase of a counter from `a` to `b`: a drop means a reset (the process restarted).
double Increase(double a, double b) { return b >= a ? b - a : b; }

}  // namespace

void AddDispatcherPage(const std::vector<promtext::MetricSample>& samples, ScrapeSnapshot* snap) {
  snap->dispatcher_ok = true;
  snap->client_wait = promtext::SumSamples(samples, "sluice_client_wait_seconds_total");
  snap->client_step = promtext::SumSamples(samples, "sluice_client_step_seconds_total");
  snap->client_elements = promtext::SumSamples(samples, "sluice_client_elements_total");
  snap->heartbeat_removals =
      promtext::SumSamples(samples, "sluice_dispatcher_worker_removals_total", {{"reason", "heartbeat timeout"}});
}

void AddWorkerPage(const std::string& worker, const std::vector<promtext::MetricSample>& samples,
                   ScrapeSnapshot* snap) {
  ScrapeSnapshot::Worker w;
  w.produced = promtext::SumSamples(samples, "sluice_worker_elements_produced_total");
  w.busy = promtext::SumSamples(samples, "sluice_worker_busy_seconds_total");
  w.buffered = promtext::SumSamples(samples, "sluice_worker_buffered_elements");
  w.local = promtext::CountSamples(samples, "sluice_worker_elements_produced_total", {{"placement", "local"}}) > 0;
  snap->workers[worker] = w;
}

Signals SignalsFromSnapshots(const std::deque<ScrapeSnapshot>& snapshots, absl::Duration window,
                             absl::Duration min_span) {
  Signals s;
  s.window = window;
  auto all_missing = [&s](const std::string& why) {
    for (Measurement* m : {&s.stall_ratio, &s.demand, &s.supply, &s.worker_cpu, &s.compute_per_element, &s.buffered,
                           &s.churn, &s.workers, &s.local_workers}) {
      *m = Measurement::Missing(why);
    }
  };
  if (snapshots.empty()) {
    all_missing("not scraped yet");
    return s;
  }
  const ScrapeSnapshot& last = snapshots.back();
  s.at = last.at;
  if (!last.dispatcher_ok) {
    all_missing("the dispatcher's /metrics did not answer");
    return s;
  }
  // The first snapshot within the window (with a dispatcher page), by index (a deque's elements
  // are not one array).
  size_t first_index = snapshots.size();
  for (size_t i = 0; i + 1 < snapshots.size(); ++i) {
    if (snapshots[i].dispatcher_ok && snapshots[i].at >= last.at - window) {
      first_index = i;
      break;
    }
  }
  const ScrapeSnapshot* first = first_index < snapshots.size() ? &snapshots[first_index] : nullptr;
  if (first == nullptr || last.at - first->at < min_span) {
    all_missing(absl::StrCat("warming up: no two scrapes ", absl::FormatDuration(min_span), " apart yet"));
    return s;
  }
  const double span = absl::ToDoubleSeconds(last.at - first->at);
  s.window = last.at - first->at;

  // Dispatcher counters: sum of increases between consecutive snapshots (resets handled).
  double wait = 0, step = 0, elements = 0, removals = 0;
  const ScrapeSnapshot* prev = first;
  for (size_t i = first_index + 1; i < snapshots.size(); ++i) {
    const ScrapeSnapshot& snap = snapshots[i];
    if (!snap.dispatcher_ok) continue;
    wait += Increase(prev->client_wait, snap.client_wait);
    step += Increase(prev->client_step, snap.client_step);
    elements += Increase(prev->client_elements, snap.client_elements);
    removals += Increase(prev->heartbeat_removals, snap.heartbeat_removals);
    prev = &snap;
  }
  s.demand = Measurement::Of(elements / span);
  s.stall_ratio = step > 0 ? Measurement::Of(std::clamp(wait / step, 0.0, 1.0)) : Measurement::Missing("no steps in the window");
  s.compute_per_element =
      elements > 0 ? Measurement::Of(std::max(0.0, step - wait) / elements) : Measurement::Missing("no elements in the window");
  s.churn = Measurement::Of(removals);

  // Workers present at both ends of the window.
  double produced = 0, busy = 0, buffered = 0;
  int workers = 0, local = 0;
  for (const auto& [name, w_last] : last.workers) {
    buffered += w_last.buffered;
    auto w_first = first->workers.find(name);
    if (w_first == first->workers.end()) continue;
    // Sum the increases snapshot to snapshot (a restart in between resets the counter).
    double p = 0, b = 0;
    const ScrapeSnapshot::Worker* before = &w_first->second;
    for (size_t i = first_index + 1; i < snapshots.size(); ++i) {
      auto it = snapshots[i].workers.find(name);
      if (it == snapshots[i].workers.end()) continue;
      p += Increase(before->produced, it->second.produced);
      b += Increase(before->busy, it->second.busy);
      before = &it->second;
    }
    produced += p;
    busy += b;
    ++workers;
    if (w_last.local) ++local;
  }
  s.supply = Measurement::Of(produced / span);
  s.worker_cpu = Measurement::Of(busy / span);
  s.buffered = Measurement::Of(buffered);
  s.workers = Measurement::Of(workers);
  s.local_workers = Measurement::Of(local);
  return s;
}

absl::StatusOr<std::vector<promtext::MetricSample>> ScrapeSource::Scrape(const absl::StatusOr<Fetcher>& fetcher,
                                                                        const std::string& base_url) {
  if (!fetcher.ok()) return fetcher.status();
  auto result = (*fetcher)->Get("/metrics");
  if (!result.ok()) return result.status();
  if (result->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", base_url, "/metrics: HTTP ", result->status));
  }
  auto samples = promtext::ParsePrometheusText(result->body);
  if (!samples.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(base_url, "/metrics: ", samples.status().message()));
  }
  return samples;
}

Observation ScrapeSource::Observe(const ObserveRequest& request, absl::Time now) {
  const std::string key = absl::StrCat(request.ns, "/", request.name);
  // The clients of this observation's addresses: kept ones reused, new ones made, the rest dropped.
  std::map<std::string, absl::StatusOr<Fetcher>> fetchers, dropped;  // dropped: destroyed after the lock
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, absl::StatusOr<Fetcher>>& kept = fetchers_[key];
    auto take = [&](const std::string& url) {
      if (url.empty() || fetchers.count(url) > 0) return;
      auto it = kept.find(url);
      if (it != kept.end()) {
        fetchers.emplace(url, std::move(it->second));
        return;
      }
      HttpAuthOptions auth;
      auth.timeout = options_.timeout;
      absl::StatusOr<std::unique_ptr<HttpFetcher>> created = HttpFetcher::Create(url, auth);
      if (created.ok()) {
        fetchers.emplace(url, Fetcher(*std::move(created)));
      } else {
        fetchers.emplace(url, created.status());
      }
    };
    take(request.dispatcher_metrics_url);
    for (const auto& [name, url] : request.worker_metrics_urls) take(url);
    dropped = std::exchange(kept, fetchers);
  }
  auto scrape = [&fetchers](const std::string& url) { return Scrape(fetchers.at(url), url); };

  Observation out;
  ScrapeSnapshot snap;
  snap.at = now;
  if (request.dispatcher_metrics_url.empty()) {
    out.errors.push_back("no dispatcher to scrape (its pod has no IP yet)");
  } else {
    auto page = scrape(request.dispatcher_metrics_url);
    if (page.ok()) {
      AddDispatcherPage(*page, &snap);
    } else {
      out.errors.push_back(std::string(page.status().message()));
    }
  }
  std::vector<std::string> worker_errors;
  for (const auto& [name, url] : request.worker_metrics_urls) {
    auto page = scrape(url);
    if (page.ok()) {
      AddWorkerPage(name, *page, &snap);
    } else {
      worker_errors.push_back(std::string(page.status().message()));
    }
  }
  if (!request.worker_metrics_urls.empty() && snap.workers.empty()) {
    out.errors.push_back(absl::StrCat("no worker's /metrics answered: ", worker_errors.front()));
  }
  absl::MutexLock lock(&mu_);
  std::deque<ScrapeSnapshot>& history = history_[key];
  // Keep the window and one snapshot before it; a clock that went back starts over.
  if (!history.empty() && history.back().at > now) history.clear();
  history.push_back(std::move(snap));
  while (history.size() > 2 && history[1].at < now - options_.window) history.pop_front();
  out.signals = SignalsFromSnapshots(history, options_.window, options_.min_span);
  return out;
}

size_t ScrapeSource::http_clients() {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, by_url] : fetchers_) {
    for (const auto& [url, fetcher] : by_url) n += fetcher.ok() ? 1 : 0;
  }
  return n;
}

void ScrapeSource::Forget(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  history_.erase(absl::StrCat(ns, "/", name));
  fetchers_.erase(absl::StrCat(ns, "/", name));
}

Observation RoutingSignalProvider::Observe(const ObserveRequest& request, absl::Time now) {
  if (request.prometheus_url) {
    return prometheus_->Observe({*request.prometheus_url, request.ns, request.name, request.queries}, now);
  }
  return scrape_->Observe(request, now);
}

void RoutingSignalProvider::Forget(const std::string& ns, const std::string& name) { scrape_->Forget(ns, name); }

}  // namespace sluice::autoscaler
