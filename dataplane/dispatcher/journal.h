// The dispatcher's journal: an append-only log of DispatcherState updates in CRC32C-framed records,
// split into segments, plus snapshots that replace the segments before them (compaction).
//
// Directory layout (`dir`):
//   journal-<first sequence, 20 digits>.log   a segment: 8-byte magic "SLJRNL01", then records
//   snapshot-<last sequence, 20 digits>.snap  magic "SLSNAP01", then ONE record: a Snapshot message
// Record framing (as TFRecord): uint64 length (little endian) | uint32 masked CRC32C of those 8
// bytes | `length` bytes of data (a serialized Update) | uint32 masked CRC32C of the data.
// Update sequence numbers are implicit: the n-th record of journal-S.log has sequence S + n.
//
// Writing: Append() only serializes into an in-memory queue (cheap, no I/O), so the owner can call
// it under its state lock and the file order always equals the Apply order. Sync(seq) performs the
// I/O outside any caller lock with group commit: one caller writes every queued record with one
// write(2) and, for fsync=always, one fsync; concurrent callers wait for it. fsync=batch fsyncs from
// a background thread every batch_interval or batch_records records; fsync=never leaves it to the
// OS. In every mode Sync() returns only after the records were handed to the OS, so a killed process
// loses nothing that a response was sent for. A write error is sticky: every later Sync fails.
//
// Compaction: the owner takes a snapshot of its state at sequence S under its lock and calls
// StartNewSegment() there (cheap), so record S+1 opens a new segment; then, without the lock, calls
// WriteSnapshot(): the snapshot goes to a temp file, is fsynced and renamed into place, and the
// segments and snapshots it makes obsolete are deleted. Replay reads the newest snapshot and the
// segments after it only, so replay time tracks the state's size, not the length of its history.
//
// Reading (Open/Read): a record cut short at the end of the LAST segment (a crash mid-write), or a
// final record whose CRC fails with nothing after it, is a torn tail: replay stops there, reports
// what it dropped, and Open truncates it away. Any other damage is an error naming file and byte
// offset.
//
// Threading: all methods are thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_JOURNAL_H_
#define SLUICE_DATAPLANE_DISPATCHER_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "journal.pb.h"

namespace sluice::dispatcher {

enum class FsyncPolicy { kAlways, kBatch, kNever };
absl::StatusOr<FsyncPolicy> ParseFsyncPolicy(absl::string_view text);
std::string FsyncPolicyName(FsyncPolicy policy);

struct JournalOptions {
  std::string dir;
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  absl::Duration batch_interval = absl::Milliseconds(100);  // fsync=batch: at least this often
  int64_t batch_records = 256;                             // fsync=batch: or after this many records
};

// What a directory holds, read without changing it.
struct JournalContents {
  std::optional<service::Snapshot> snapshot;
  std::string snapshot_file;
  std::vector<service::Update> updates;  // after the snapshot, in order
  int64_t first_sequence = 1;            // of updates[0]
  int64_t last_sequence = 0;             // of the last update (or the snapshot's when none)
  int64_t records_read = 0;              // framed records read from segments (incl. skipped old ones)
  std::vector<std::string> segment_files;
  // Torn tail of the last segment, if any.
  std::string torn_file;
  int64_t torn_offset = -1;    // where the valid data ends
  int64_t dropped_bytes = 0;   // bytes after it
  std::string torn_reason;
};

// Framing helpers, exposed for tests and tools.
std::string FrameRecord(absl::string_view data);
inline constexpr char kSegmentMagic[] = "SLJRNL01";
inline constexpr char kSnapshotMagic[] = "SLSNAP01";
inline constexpr size_t kMagicSize = 8;
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;
std::string SegmentFileName(int64_t first_sequence);
std::string SnapshotFileName(int64_t last_sequence);

class Journal {
 public:
  // Reads `dir` (missing = empty). Errors name file and offset.
  static absl::StatusOr<JournalContents> Read(const std::string& dir);

  // Reads `dir` (creating it), truncates a torn tail, removes stale temp files, and opens the
  // journal for appending after the last record. `contents` receives what was read.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const JournalOptions& options, JournalContents* contents);
  ~Journal();  // Close()s

  // Queues `update`; returns its sequence number. No I/O.
  int64_t Append(const service::Update& update);
  // The sequence number of the last Append (0 when none).
  int64_t last_appended() const;
  // Makes every record up to `sequence` reach the OS (and the disk for fsync=always). Does I/O:
  // never call it while holding a lock that other threads need to make progress.
  absl::Status Sync(int64_t sequence);
  // The next Append starts a new segment file. No I/O.
  void StartNewSegment();
  // Writes `snapshot` (its last_update_sequence = S, with S <= last_appended() and
  // StartNewSegment() called right after S was appended) and deletes what it makes obsolete.
  absl::Status WriteSnapshot(const service::Snapshot& snapshot);
  // Writes and fsyncs everything queued, stops the batch thread. Idempotent.
  absl::Status Close();

  // OK, or the sticky write error.
  absl::Status health() const;
  // Bytes in the directory's live segments and snapshot.
  int64_t bytes() const { return bytes_.load(); }
  int64_t snapshots_written() const { return snapshots_written_.load(); }
  const JournalOptions& options() const { return options_; }

 private:
  struct Pending {
    int64_t sequence;
    bool new_segment;  // this record opens a new segment file
    std::string framed;
  };
  explicit Journal(JournalOptions options);
  // Becomes the writer (or waits for the current one) until `sequence` is written and, when
  // `fsync`, synced. Called with mu_ held; releases it around I/O.
  absl::Status FlushLocked(int64_t sequence, bool fsync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // I/O of one flush; only the thread that set writing_ calls these.
  absl::Status WriteBatch(std::vector<Pending>& batch);
  absl::Status OpenSegment(int64_t first_sequence);
  absl::Status SyncFd();
  void BatchLoop();

  const JournalOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  int64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t synced_ ABSL_GUARDED_BY(mu_) = 0;
  bool new_segment_requested_ ABSL_GUARDED_BY(mu_) = true;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a thread is doing I/O with the fields below
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, std::string>> segments_ ABSL_GUARDED_BY(mu_);  // first sequence, path
  std::string snapshot_path_ ABSL_GUARDED_BY(mu_);
  bool snapshot_in_progress_ ABSL_GUARDED_BY(mu_) = false;

  // Owned by the thread that set writing_ (handed over through mu_).
  int fd_ = -1;
  std::string fd_path_;
  int64_t fd_offset_ = 0;

  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> snapshots_written_{0};
  std::thread batch_thread_;
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_JOURNAL_H_
