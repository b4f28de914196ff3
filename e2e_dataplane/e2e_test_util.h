// Helpers for the multi-process data-service tests: start a LocalDataService from the build's bin/
// directory with test-friendly timings, build pipelines from YAML, create real C++ clients and read
// a job to its end with a deadline. Test-only; every helper is thread-compatible.
#ifndef SLUICE_E2E_DATAPLANE_E2E_TEST_UTIL_H_
#define SLUICE_E2E_DATAPLANE_E2E_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "dataplane/client/data_service_client.h"
#include "local/local_dataservice.h"
#include "pipeline.pb.h"

namespace sluice::e2e {

// Heartbeats every 100 ms; a worker is removed after `worker_timeout_ms` without one.
local::LocalDataServiceOptions TestServiceOptions(int64_t worker_timeout_ms = 10000);

// A started dispatcher plus `workers` workers, all registered (REQUIREs success).
std::unique_ptr<local::LocalDataService> StartService(int workers, local::LocalDataServiceOptions options);

// Parses a pipeline spec (REQUIREs success).
pipeline::PipelineDef Pipeline(const std::string& yaml);
// source: range {stop: n, split_size}; field `value`.
pipeline::PipelineDef RangePipeline(int64_t n, int64_t split_size);
// As RangePipeline, with `value` padded with zeros to `length` int64s (8*length bytes per element):
// large enough elements that a client which stops reading stalls the workers (the streams' flow
// control windows hold a few MiB). The map runs inline (parallelism 1): a parallel map reads up to
// 2 x parallelism x 64 elements ahead, elements a dead worker would take with it.
pipeline::PipelineDef PaddedRangePipeline(int64_t n, int64_t split_size, int64_t length);

// Client options with fast heartbeats for `sharding` on `address`.
client::DataServiceClientOptions ClientOptions(const std::string& address, const pipeline::PipelineDef& def,
                                               service::ShardingPolicy sharding);
std::unique_ptr<client::DataServiceClient> MakeClient(client::DataServiceClientOptions options);

// The int64 scalar field `field` of an element, or its first entry if it is not a scalar (REQUIREs it).
int64_t IntField(const pipeline::Element& element, const std::string& field = "value");
// As IntField, without Catch2 assertions (for reader threads): nullopt when there is no such field.
std::optional<int64_t> TryIntField(const pipeline::Element& element, const std::string& field = "value");
std::string StringField(const pipeline::Element& element, const std::string& field);

// One GetNext with a generous deadline: the element, or nullopt at the end (REQUIREs no error).
std::optional<pipeline::Element> Next(client::DataServiceClient& client, absl::Duration timeout = absl::Seconds(60));
// Reads `client` to its end; returns the `field` of every element in arrival order.
std::vector<int64_t> ReadAll(client::DataServiceClient& client, const std::string& field = "value",
                             absl::Duration timeout = absl::Seconds(60));
// Reads up to `n` elements (fewer at the end).
std::vector<int64_t> ReadSome(client::DataServiceClient& client, int64_t n, const std::string& field = "value");

// Reads two clients to their ends, alternating on one thread: each GetNext blocks until that
// client has an element, so both take part whatever the scheduling.
void ReadBothToEnd(client::DataServiceClient& a, client::DataServiceClient& b, std::vector<int64_t>* from_a,
                   std::vector<int64_t>* from_b, const std::string& field = "value");

// Per-worker data for tests where every worker runs the same spec on a file of its own (a relative
// path in its own working directory), so each element names its worker: writes `lines` lines of
// {"w": worker, "i": position} to dir/data.jsonl.
void WriteWorkerData(const std::string& dir, int worker, int lines);

// Starts `n` workers, worker w in working directory `dir_prefix`w holding WriteWorkerData(w, lines),
// and waits until the dispatcher lists them all.
void AddWorkersWithOwnData(local::LocalDataService& service, const std::string& dir_prefix, int n, int lines);

// Ranges of the values in [0, n) never seen, e.g. "100-149 300-312" (for failure messages).
std::string MissingRanges(const std::map<int64_t, int>& counts, int64_t n);
// value -> times seen.
std::map<int64_t, int> Counts(const std::vector<int64_t>& values);
// Values in [0, n) seen a number of times other than `times` (empty: every value exactly `times`),
// and values outside [0, n).
std::string CountProblems(const std::map<int64_t, int>& counts, int64_t n, int times);

// Polls `condition` (every 20 ms) until it holds or `timeout` passes; returns whether it held.
bool PollUntil(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(30));

// Sum of a worker metric over one worker's /metrics (REQUIREs the scrape).
double WorkerMetric(const local::LocalDataService& service, int worker, const std::string& name);

}  // namespace sluice::e2e

#endif  // SLUICE_E2E_DATAPLANE_E2E_TEST_UTIL_H_
