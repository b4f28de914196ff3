#include "dataplane/client/round_reader.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/client/element_decoder.h"
#include "dataplane/client/job_session.h"
#include "dataplane/client/retry_policy.h"
#include "dataplane/client/round_robin.h"

namespace sluice::client {

RoundReader::RoundReader(Options options, WorkerRpc* workers, ElementQueue* queue)
    : opts_(std::move(options)), workers_(workers), queue_(queue) {}

RoundReader::~RoundReader() {
  Stop();
  Join();
}

void RoundReader::Start() {
  {
    absl::MutexLock l(&mu_);
    running_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
}

void RoundReader::Join() {
  if (thread_.joinable()) thread_.join();
}

bool RoundReader::Update(const service::ClientHeartbeatResponse& response) {
  absl::MutexLock l(&mu_);
  heard_ = true;
  job_finished_ = response.job_finished();
  tasks_.assign(response.tasks().begin(), response.tasks().end());
  const int64_t proposed = response.block_round();
  const bool started = round_started_ && current_round_ >= proposed;
  block_round_ = (proposed > 0 && !started) ? proposed : 0;
  return block_round_ > 0;
}

void RoundReader::FillHeartbeat(service::ClientHeartbeatRequest* request) const {
  absl::MutexLock l(&mu_);
  request->set_current_round(current_round_);
  request->set_acked_block_round(block_round_);
}

bool RoundReader::running() const {
  absl::MutexLock l(&mu_);
  return running_;
}
int64_t RoundReader::current_round() const {
  absl::MutexLock l(&mu_);
  return current_round_;
}
int64_t RoundReader::rounds_skipped() const {
  absl::MutexLock l(&mu_);
  return rounds_skipped_;
}
int64_t RoundReader::reconnects() const {
  absl::MutexLock l(&mu_);
  return reconnects_;
}

void RoundReader::Loop() {
  RetryPolicy policy(RetryPolicy::Peer::kWorkerRound, opts_.initial_backoff, opts_.max_backoff);
  int64_t round = 0;
  while (!stop_.cancelled()) {
    {
      // A stop wakes the wait below (lock order: the token's mutex, then this one).
      CancelCallback wake(&stop_, [this] { absl::MutexLock l(&mu_); });
      absl::MutexLock l(&mu_);
      auto ready = [&] {
        mu_.AssertHeld();
        if (stop_.cancelled() || job_finished_) return true;
        return heard_ && !tasks_.empty() && (block_round_ == 0 || round < block_round_);
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_.cancelled()) break;
      if (tasks_.empty()) break;  // the job finished with no task left
    }
    if (!queue_->AcquireSlot(stop_)) break;
    service::TaskInfo task;
    bool wait = false;
    bool finished = false;
    {
      absl::MutexLock l(&mu_);
      // The task list and the block may have changed while waiting for room: decide now.
      std::optional<int64_t> id = TaskForRound(tasks_, round);
      if (!id && !tasks_.empty()) {
        // Every task starts later than `round` (this consumer joined late): all consumers jump
        // to the first round a task serves.
        int64_t first = tasks_.front().starting_round();
        for (const auto& t : tasks_) first = std::min(first, t.starting_round());
        round = std::max(round, first);
        id = TaskForRound(tasks_, round);
      }
      if (!id || (block_round_ > 0 && !job_finished_ && round >= block_round_)) {
        // No task left (the job finished), or a worker is joining at or before this round: wait.
        wait = true;
        finished = !id && (tasks_.empty() || job_finished_);
      } else {
        for (const auto& t : tasks_) {
          if (t.task_id() == *id) task = t;
        }
        current_round_ = round;
        round_started_ = true;
      }
    }
    if (wait) {
      queue_->ReleaseSlot();
      if (finished) break;
      continue;
    }
    const std::string where =
        absl::StrCat("worker ", task.worker_address(), " task ", task.task_id(), " round ", round);
    service::GetElementsRequest req;
    req.set_task_id(task.task_id());
    req.set_job_client_id(opts_.job_client_id);
    req.set_consumer_index(opts_.consumer_index);
    req.set_round(round);
    req.set_max_elements(1);
    req.set_compression(opts_.compression);
    req.set_allow_skip_round(true);
    CallOptions call;
    call.deadline = absl::Now() + opts_.rpc_timeout;
    call.wait_for_ready = policy.wait_for_ready();
    call.cancel = &stop_;
    absl::StatusOr<service::GetElementsResponse> resp = workers_->GetElement(task.worker_address(), req, call);

    absl::Status bad;
    std::vector<DecodedElement> decoded;
    if (resp.ok() && !resp->end_of_sequence() && !resp->round_skipped()) {
      if (resp->elements_size() != 1) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(where, ": malformed response: ", resp->elements_size(), " elements (want exactly 1)"));
      } else if (resp->elements(0).round() != round) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(where, ": malformed response: element is for round ", resp->elements(0).round()));
      } else {
        auto d = DecodeElementData(*resp->mutable_elements(0), opts_.max_element_bytes);
        if (d.ok()) {
          decoded.push_back(*std::move(d));
        } else {
          bad = absl::InvalidArgumentError(absl::StrCat(where, ": malformed response: ", d.status().message()));
        }
      }
    }
    if (stop_.cancelled()) {
      queue_->ReleaseSlot();
      break;
    }
    if (!bad.ok()) {
      queue_->ReleaseSlot();
      queue_->Fail(bad);
      break;
    }
    if (!resp.ok()) {
      queue_->ReleaseSlot();
      const RetryPolicy::Decision d = policy.OnFailure(resp.status().code());
      if (!d.retry) {
        queue_->Fail(WithContext(resp.status(), where));
        break;
      }
      {
        absl::MutexLock l(&mu_);
        if (job_finished_) break;
        ++reconnects_;
      }
      // The worker may be restarting, or gone: the next heartbeat drops its task and the round
      // is asked of the task that serves it then.
      SLUICE_LOG(Warning, "coordinated read failed; retrying")
          .With("where", where)
          .With("error", std::string(resp.status().message()))
          .With("retry_ms", absl::ToInt64Milliseconds(d.delay));
      if (stop_.WaitFor(d.delay)) break;
      continue;
    }
    policy.OnSuccess();
    if (resp->end_of_sequence()) {
      queue_->ReleaseSlot();
      break;
    }
    if (resp->round_skipped()) {
      queue_->ReleaseSlot();
      absl::MutexLock l(&mu_);
      ++rounds_skipped_;
    } else {
      queue_->Push(std::move(decoded));
    }
    ++round;
  }
  {
    absl::MutexLock l(&mu_);
    running_ = false;
  }
  queue_->SetEnd();
}

}  // namespace sluice::client
