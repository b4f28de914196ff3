// Helpers shared by the dispatcher's tests: small pipelines and a service with a fake clock and a
// journal that can be "restarted" (closed, reopened and replayed) in-process.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_TEST_UTIL_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_TEST_UTIL_H_

#include <memory>
#include <string>

#include "dataplane/dispatcher/clock.h"
#include "dataplane/dispatcher/dispatcher_impl.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/dispatcher/journal.h"
#include "pipeline.pb.h"
#include "prometheus/registry.h"

namespace sluice::dispatcher::testing {

// `range` source: values [0, stop) in splits of `split_size` (so ceil(stop/split_size) splits).
inline pipeline::PipelineDef RangePipeline(int64_t stop, int64_t split_size) {
  pipeline::PipelineDef def;
  def.mutable_source()->set_kind("range");
  auto* args = def.mutable_source()->mutable_args();
  auto* a = args->add_entries();
  a->set_name("stop");
  a->mutable_value()->set_int_value(stop);
  auto* b = args->add_entries();
  b->set_name("split_size");
  b->mutable_value()->set_int_value(split_size);
  return def;
}

// A DispatcherService over a journal directory (or none), with a fake clock and its own metrics
// registry. Restart() simulates a process restart: the service and journal are destroyed and
// rebuilt from the directory.
class ServiceHarness {
 public:
  explicit ServiceHarness(std::string journal_dir, DispatcherOptions options = {},
                          FsyncPolicy fsync = FsyncPolicy::kNever)
      : journal_dir_(std::move(journal_dir)), options_(std::move(options)), fsync_(fsync) {
    Start();
  }
  ~ServiceHarness() { Stop(); }

  void Restart() {
    Stop();
    Start();
  }
  DispatcherService& service() { return *service_; }
  FakeClock& clock() { return clock_; }
  Journal* journal() { return journal_.get(); }
  prometheus::Registry& registry() { return *registry_; }
  const JournalContents& recovered() const { return recovered_; }
  const absl::Status& start_status() const { return start_status_; }

 private:
  void Start() {
    registry_ = std::make_shared<prometheus::Registry>();
    metrics_ = std::make_unique<DispatcherMetrics>(*registry_, "test");
    recovered_ = JournalContents();
    if (!journal_dir_.empty()) {
      JournalOptions jo;
      jo.dir = journal_dir_;
      jo.fsync = fsync_;
      auto journal = Journal::Open(jo, &recovered_);
      start_status_ = journal.status();
      if (journal.ok()) journal_ = std::move(*journal);
    }
    service_ = std::make_unique<DispatcherService>(options_, &clock_, journal_.get(), metrics_.get());
    if (start_status_.ok()) start_status_ = service_->Recover(recovered_);
  }
  void Stop() {
    service_.reset();
    journal_.reset();
    metrics_.reset();
  }

  const std::string journal_dir_;
  const DispatcherOptions options_;
  const FsyncPolicy fsync_;
  FakeClock clock_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<DispatcherMetrics> metrics_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<DispatcherService> service_;
  JournalContents recovered_;
  absl::Status start_status_;
};

}  // namespace sluice::dispatcher::testing

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_TEST_UTIL_H_
