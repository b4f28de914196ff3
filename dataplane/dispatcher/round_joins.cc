#include "dataplane/dispatcher/round_joins.h"

#include <algorithm>

#include "common/log.h"
#include "dataplane/dispatcher/task_placement.h"

namespace sluice::dispatcher {

int64_t RoundJoins::StartingRound(const DispatcherState::Job& job) const {
  if (job.spec.num_consumers() == 0) return 0;
  auto it = max_round_seen_.find(job.id);
  if (job.tasks.empty()) {
    // Nobody serves rounds, so the clients wait where they are: start right there.
    if (it != max_round_seen_.end()) return it->second;
    return std::max<int64_t>(0, job.round_watermark - kRoundWatermarkLookahead);
  }
  // Before any client reported a round since this process started (a restart), the journaled
  // watermark bounds the rounds clients may have reached.
  const int64_t reached = it != max_round_seen_.end() ? it->second : job.round_watermark;
  return reached + kStartingRoundMargin;
}

void RoundJoins::AddWorker(const DispatcherState::Job& job, const std::string& address, int32_t worker_index,
                           int32_t num_workers) {
  auto [it, created] = pending_joins_.try_emplace(job.id);
  if (created) it->second.round = StartingRound(job);
  if (it->second.workers.emplace(address, std::make_pair(worker_index, num_workers)).second) {
    SLUICE_LOG(Info, "worker joins a coordinated job once its consumers agree on a round")
        .With("job_id", job.id)
        .With("worker_address", address)
        .With("proposed_round", it->second.round);
  }
}

absl::Status RoundJoins::OnClientHeartbeat(JournaledState& js, const DispatcherState::Job& job, int64_t client_id,
                                           int64_t current_round, int64_t acked_block_round,
                                           std::optional<int64_t>* block_round) {
  if (!job.finished) {
    int64_t& seen = max_round_seen_[job.id];
    seen = std::max(seen, current_round);
    if (seen + kStartingRoundMargin >= job.round_watermark) {
      service::Update u;
      u.mutable_round_watermark()->set_job_id(job.id);
      u.mutable_round_watermark()->set_round(seen + kRoundWatermarkLookahead);
      if (absl::Status s = js.Commit(u); !s.ok()) return s;
    }
  }
  auto p = pending_joins_.find(job.id);
  if (p == pending_joins_.end()) return absl::OkStatus();
  PendingJoin& join = p->second;
  if (current_round >= join.round) {
    // This client got there first: propose a later round, further ahead.
    join.margin = std::min(join.margin * 2, kMaxStartingRoundMargin);
    join.round = max_round_seen_[job.id] + join.margin;
    join.acked.clear();
  } else if (acked_block_round == join.round) {
    join.acked.insert(client_id);
  }
  const int64_t proposed = join.round;
  if (absl::Status s = CompleteIfAgreed(js, job.id); !s.ok()) return s;
  if (pending_joins_.count(job.id)) *block_round = proposed;
  return absl::OkStatus();
}

absl::Status RoundJoins::CompleteIfAgreed(JournaledState& js, int64_t job_id) {
  auto it = pending_joins_.find(job_id);
  if (it == pending_joins_.end()) return absl::OkStatus();
  const DispatcherState::Job* job = js.state().FindJob(job_id);
  if (job == nullptr || job->finished || it->second.workers.empty()) {
    pending_joins_.erase(it);
    return absl::OkStatus();
  }
  bool agreed = true;
  for (int64_t c : job->clients) agreed &= it->second.acked.count(c) > 0;
  if (!agreed && !job->tasks.empty()) return absl::OkStatus();
  const PendingJoin done = std::move(it->second);
  pending_joins_.erase(it);
  for (const auto& [address, slot] : done.workers) {
    if (js.state().FindWorker(address) == nullptr || HasTaskOn(js.state(), *job, address)) continue;
    if (absl::Status s = CreateTask(js, *job, address, slot.first, slot.second, done.round); !s.ok()) return s;
    SLUICE_LOG(Info, "worker joined a coordinated job")
        .With("job_id", job_id)
        .With("worker_address", address)
        .With("starting_round", done.round);
  }
  return absl::OkStatus();
}

std::vector<int64_t> RoundJoins::PendingJobs() const {
  std::vector<int64_t> jobs;
  for (const auto& [job_id, join] : pending_joins_) jobs.push_back(job_id);
  return jobs;
}

absl::Status RoundJoins::ClientReleased(JournaledState& js, int64_t job_id, int64_t client_id) {
  auto it = pending_joins_.find(job_id);
  if (it == pending_joins_.end()) return absl::OkStatus();
  it->second.acked.erase(client_id);
  return CompleteIfAgreed(js, job_id);
}

void RoundJoins::WorkerRemoved(const std::string& address) {
  for (auto it = pending_joins_.begin(); it != pending_joins_.end();) {
    it->second.workers.erase(address);
    it = it->second.workers.empty() ? pending_joins_.erase(it) : std::next(it);
  }
}

void RoundJoins::JobForgotten(int64_t job_id) { max_round_seen_.erase(job_id); }

void RoundJoins::ClientReplaced(int64_t client_id, std::string reason) {
  replaced_clients_[client_id] = std::move(reason);
}

const std::string* RoundJoins::ReplacedReason(int64_t client_id) const {
  auto it = replaced_clients_.find(client_id);
  return it == replaced_clients_.end() ? nullptr : &it->second;
}

}  // namespace sluice::dispatcher
