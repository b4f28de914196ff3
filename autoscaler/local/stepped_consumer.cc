#include "autoscaler/local/stepped_consumer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sluice::autoscaler {

int ElementsPerStep(absl::Duration step_time) {
  if (step_time <= absl::ZeroDuration()) return 64;
  const double n = std::ceil(absl::FDivDuration(absl::Milliseconds(5), step_time));
  return static_cast<int>(std::clamp(n, 1.0, 64.0));
}

absl::StatusOr<std::unique_ptr<SteppedConsumer>> SteppedConsumer::Start(SteppedConsumerOptions options) {
  if (options.step_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the step time must not be negative");
  }
  if (options.elements_per_step < 0) return absl::InvalidArgumentError("elements_per_step must not be negative");
  auto client = client::DataServiceClient::Create(options.client);
  if (!client.ok()) return client.status();
  std::unique_ptr<SteppedConsumer> c(new SteppedConsumer(std::move(options), *std::move(client)));
  c->thread_ = std::thread([p = c.get()] { p->Run(); });
  return c;
}

SteppedConsumer::SteppedConsumer(SteppedConsumerOptions options, std::unique_ptr<client::DataServiceClient> client)
    : options_(std::move(options)),
      client_(std::move(client)),
      step_ns_(absl::ToInt64Nanoseconds(options_.step_time)) {}

SteppedConsumer::~SteppedConsumer() { Stop(); }

void SteppedConsumer::set_step_time(absl::Duration step) {
  step_ns_.store(absl::ToInt64Nanoseconds(std::max(step, absl::ZeroDuration())));
}

absl::Duration SteppedConsumer::step_time() const { return absl::Nanoseconds(step_ns_.load()); }

void SteppedConsumer::Stop() {
  stopping_ = true;
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
}

client::ClientStats SteppedConsumer::stats() const { return client_->stats(); }

bool SteppedConsumer::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

absl::Status SteppedConsumer::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::map<int64_t, int> SteppedConsumer::recorded() const {
  absl::MutexLock lock(&mu_);
  return recorded_;
}

void SteppedConsumer::Run() {
  std::vector<int64_t> values;
  while (!stopping_) {
    const absl::Duration step = step_time();
    const int n = options_.elements_per_step > 0 ? options_.elements_per_step : ElementsPerStep(step);
    bool end = false;
    int got = 0;
    values.clear();
    {
      client::StepScope scope(*client_);
      while (got < n && !stopping_) {
        auto next = client_->GetNext(absl::Milliseconds(200));
        if (!next.ok()) {
          if (absl::IsDeadlineExceeded(next.status())) continue;
          if (!stopping_) {
            absl::MutexLock lock(&mu_);
            status_ = next.status();
          }
          end = true;
          break;
        }
        if (!next->has_value()) {
          absl::MutexLock lock(&mu_);
          finished_ = true;
          end = true;
          break;
        }
        ++got;
        if (!options_.record_field.empty()) {
          auto tensor = (*next)->Get(options_.record_field);
          if (tensor.ok() && (*tensor)->num_elements() >= 1) {
            values.push_back((*tensor)->rank() > 0 ? static_cast<int64_t>((*tensor)->GetAsDouble(0))
                                                   : (*tensor)->AsInt64().value_or(-1));
          }
        }
      }
      // The compute of the elements read (a partial last step computes what it got).
      if (got > 0 && step > absl::ZeroDuration() && !stopping_) absl::SleepFor(step * got);
    }
    if (!values.empty()) {
      absl::MutexLock lock(&mu_);
      for (int64_t v : values) ++recorded_[v];
    }
    if (end) break;
  }
}

}  // namespace sluice::autoscaler
