#include "dataplane/dispatcher/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/tfrecord/crc32c.h"

namespace sluice::dispatcher {
namespace fs = std::filesystem;

namespace {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // data CRC

void PutFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutFixed32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t GetFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  return absl::UnavailableError(absl::StrCat(what, " '", path, "': ", std::strerror(e)));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return ss.str();
}

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write journal file", path);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open journal directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync journal directory", dir);
  return absl::OkStatus();
}

// The records of one file. `allow_torn_tail`: a cut-short or bad final record ends the file
// cleanly (reported in `torn_*`) instead of being an error.
struct FileRecords {
  std::vector<std::pair<int64_t, absl::string_view>> records;  // offset, data
  int64_t valid_end = 0;
  bool torn = false;
  std::string torn_reason;
};

absl::StatusOr<FileRecords> ParseFile(const std::string& path, const std::string& data, absl::string_view magic,
                                      bool allow_torn_tail) {
  FileRecords out;
  auto torn = [&](int64_t offset, std::string reason) -> absl::StatusOr<FileRecords> {
    if (!allow_torn_tail) {
      return absl::DataLossError(absl::StrCat("'", path, "' offset ", offset, ": ", reason,
                                              " (only the last journal segment may end in a torn record)"));
    }
    out.valid_end = offset;
    out.torn = true;
    out.torn_reason = std::move(reason);
    return std::move(out);
  };
  if (data.size() < kMagicSize) {
    if (absl::string_view(magic).substr(0, data.size()) == data) return torn(0, "file header cut short");
    return absl::DataLossError(absl::StrCat("'", path, "' offset 0: not a Sluice journal file (bad header)"));
  }
  if (absl::string_view(data.data(), kMagicSize) != magic) {
    return absl::DataLossError(absl::StrCat("'", path, "' offset 0: not a Sluice journal file (expected header '", magic,
                                            "')"));
  }
  size_t offset = kMagicSize;
  while (offset < data.size()) {
    const size_t remaining = data.size() - offset;
    if (remaining < kHeaderBytes) return torn(offset, "record header cut short");
    const char* p = data.data() + offset;
    const uint64_t length = GetFixed64(p);
    if (pipeline::MaskedCrc32c(p, 8) != GetFixed32(p + 8)) {
      const bool all_zero = std::all_of(p, data.data() + data.size(), [](char c) { return c == 0; });
      if (all_zero) return torn(offset, "zero-filled tail");
      return absl::DataLossError(
          absl::StrCat("'", path, "' offset ", offset, ": record length checksum mismatch (the journal is corrupt)"));
    }
    if (length > kMaxRecordBytes) {
      return absl::DataLossError(
          absl::StrCat("'", path, "' offset ", offset, ": record length ", length, " exceeds ", kMaxRecordBytes));
    }
    if (remaining < kHeaderBytes + length + kFooterBytes) return torn(offset, "record cut short");
    const char* body = p + kHeaderBytes;
    if (pipeline::MaskedCrc32c(body, length) != GetFixed32(body + length)) {
      if (remaining == kHeaderBytes + length + kFooterBytes) return torn(offset, "last record's checksum mismatch");
      return absl::DataLossError(
          absl::StrCat("'", path, "' offset ", offset, ": record data checksum mismatch (the journal is corrupt)"));
    }
    out.records.emplace_back(static_cast<int64_t>(offset), absl::string_view(body, length));
    offset += kHeaderBytes + length + kFooterBytes;
  }
  out.valid_end = static_cast<int64_t>(offset);
  return out;
}

// Parses "<prefix><20 digits><suffix>".
bool ParseNumberedName(const std::string& name, absl::string_view prefix, absl::string_view suffix, int64_t* number) {
  if (name.size() != prefix.size() + 20 + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix.data(), prefix.size()) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) != 0) return false;
  return absl::SimpleAtoi(name.substr(prefix.size(), 20), number);
}

struct DirectoryListing {
  std::map<int64_t, std::string> segments;   // first sequence -> path
  std::map<int64_t, std::string> snapshots;  // last sequence -> path
  std::vector<std::string> temp_files;
};

absl::StatusOr<DirectoryListing> ListDirectory(const std::string& dir) {
  DirectoryListing out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t n = 0;
    if (ParseNumberedName(name, "journal-", ".log", &n)) {
      out.segments[n] = entry.path().string();
    } else if (ParseNumberedName(name, "snapshot-", ".snap", &n)) {
      out.snapshots[n] = entry.path().string();
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      out.temp_files.push_back(entry.path().string());
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list journal directory '", dir, "': ", ec.message()));
  return out;
}

int64_t FileSize(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

int64_t DirectoryBytes(const std::string& dir) {
  auto listing = ListDirectory(dir);
  if (!listing.ok()) return 0;
  int64_t total = 0;
  for (const auto& [n, path] : listing->segments) total += FileSize(path);
  for (const auto& [n, path] : listing->snapshots) total += FileSize(path);
  return total;
}

}  // namespace

absl::StatusOr<FsyncPolicy> ParseFsyncPolicy(absl::string_view text) {
  if (text == "always") return FsyncPolicy::kAlways;
  if (text == "batch") return FsyncPolicy::kBatch;
  if (text == "never") return FsyncPolicy::kNever;
  return absl::InvalidArgumentError(absl::StrCat("--fsync: '", text, "' is not one of always, batch, never"));
}

std::string FsyncPolicyName(FsyncPolicy policy) {
  switch (policy) {
    case FsyncPolicy::kAlways: return "always";
    case FsyncPolicy::kBatch: return "batch";
    case FsyncPolicy::kNever: return "never";
  }
  return "?";
}

std::string FrameRecord(absl::string_view data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  PutFixed64(&out, data.size());
  PutFixed32(&out, pipeline::MaskedCrc32c(out.data(), 8));
  out.append(data.data(), data.size());
  PutFixed32(&out, pipeline::MaskedCrc32c(data.data(), data.size()));
  return out;
}

std::string SegmentFileName(int64_t first_sequence) { return absl::StrFormat("journal-%020d.log", first_sequence); }
std::string SnapshotFileName(int64_t last_sequence) { return absl::StrFormat("snapshot-%020d.snap", last_sequence); }

// ---------------------------------------------------------------- reading

absl::StatusOr<JournalContents> Journal::Read(const std::string& dir) {
  JournalContents out;
  auto listing = ListDirectory(dir);
  if (!listing.ok()) return listing.status();
  int64_t snapshot_sequence = 0;
  if (!listing->snapshots.empty()) {
    const auto& [sequence, path] = *listing->snapshots.rbegin();
    auto data = ReadWholeFile(path);
    if (!data.ok()) return data.status();
    auto records = ParseFile(path, *data, absl::string_view(kSnapshotMagic, kMagicSize), /*allow_torn_tail=*/false);
    if (!records.ok()) return records.status();
    if (records->records.size() != 1) {
      return absl::DataLossError(
          absl::StrCat("'", path, "': a snapshot holds exactly one record, found ", records->records.size()));
    }
    service::Snapshot snapshot;
    if (!snapshot.ParseFromArray(records->records[0].second.data(), static_cast<int>(records->records[0].second.size()))) {
      return absl::DataLossError(absl::StrCat("'", path, "' offset ", records->records[0].first,
                                              ": the record does not parse as a Snapshot"));
    }
    if (snapshot.last_update_sequence() != sequence) {
      return absl::DataLossError(absl::StrCat("'", path, "': holds sequence ", snapshot.last_update_sequence(),
                                              " but is named for ", sequence));
    }
    snapshot_sequence = sequence;
    out.snapshot = std::move(snapshot);
    out.snapshot_file = path;
  }
  int64_t next_expected = snapshot_sequence + 1;
  out.first_sequence = next_expected;
  out.last_sequence = snapshot_sequence;
  std::vector<std::pair<int64_t, std::string>> segments(listing->segments.begin(), listing->segments.end());
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& [first, path] = segments[i];
    out.segment_files.push_back(path);
    const bool is_last = i + 1 == segments.size();
    // A segment followed by one starting at or before the snapshot holds only covered records.
    if (!is_last && segments[i + 1].first <= snapshot_sequence + 1) continue;
    if (first > next_expected) {
      return absl::DataLossError(absl::StrCat("journal gap: expected update ", next_expected, " but '", path,
                                              "' starts at ", first,
                                              snapshot_sequence ? "" : " and there is no snapshot (missing files?)"));
    }
    auto data = ReadWholeFile(path);
    if (!data.ok()) return data.status();
    auto records = ParseFile(path, *data, absl::string_view(kSegmentMagic, kMagicSize), is_last);
    if (!records.ok()) return records.status();
    int64_t sequence = first;
    for (const auto& [offset, bytes] : records->records) {
      ++out.records_read;
      if (sequence >= next_expected) {
        service::Update update;
        if (!update.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          return absl::DataLossError(
              absl::StrCat("'", path, "' offset ", offset, ": record (update ", sequence, ") does not parse as an Update"));
        }
        out.updates.push_back(std::move(update));
        next_expected = sequence + 1;
      }
      ++sequence;
    }
    if (records->torn) {
      out.torn_file = path;
      out.torn_offset = records->valid_end;
      out.dropped_bytes = static_cast<int64_t>(data->size()) - records->valid_end;
      out.torn_reason = records->torn_reason;
    }
  }
  out.last_sequence = next_expected - 1;
  return out;
}

// ---------------------------------------------------------------- writing

Journal::Journal(JournalOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const JournalOptions& options, JournalContents* contents) {
  if (options.dir.empty()) return absl::InvalidArgumentError("--journal_dir is empty");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("--journal_dir: cannot create '", options.dir, "': ", ec.message()));
  }
  auto listing = ListDirectory(options.dir);
  if (!listing.ok()) return listing.status();
  for (const auto& tmp : listing->temp_files) fs::remove(tmp, ec);  // an interrupted snapshot
  auto read = Read(options.dir);
  if (!read.ok()) return read.status();
  if (!read->torn_file.empty()) {
    if (read->torn_offset <= static_cast<int64_t>(kMagicSize)) {
      fs::remove(read->torn_file, ec);
      if (ec) return absl::UnavailableError(absl::StrCat("cannot remove '", read->torn_file, "': ", ec.message()));
    } else if (::truncate(read->torn_file.c_str(), read->torn_offset) != 0) {
      return ErrnoError("cannot truncate the torn tail of", read->torn_file);
    }
  }
  // A segment that starts after the last record read holds none (one that held a valid record
  // would have advanced last_sequence): a process killed between creating it and writing its first
  // record. The next append creates it again, so it goes.
  for (const auto& [first, path] : listing->segments) {
    if (first > read->last_sequence && path != read->torn_file) {
      fs::remove(path, ec);
      if (ec) return absl::UnavailableError(absl::StrCat("cannot remove the empty segment '", path, "': ", ec.message()));
    }
  }
  std::unique_ptr<Journal> journal(new Journal(options));
  {
    absl::MutexLock lock(&journal->mu_);
    journal->appended_ = journal->written_ = journal->synced_ = read->last_sequence;
    auto after = ListDirectory(options.dir);
    if (!after.ok()) return after.status();
    for (const auto& [first, path] : after->segments) journal->segments_.emplace_back(first, path);
    if (!after->snapshots.empty()) journal->snapshot_path_ = after->snapshots.rbegin()->second;
  }
  journal->bytes_ = DirectoryBytes(options.dir);
  if (options.fsync == FsyncPolicy::kBatch) journal->batch_thread_ = std::thread([j = journal.get()] { j->BatchLoop(); });
  *contents = std::move(*read);
  return journal;
}

Journal::~Journal() { (void)Close(); }

int64_t Journal::Append(const service::Update& update) {
  std::string framed = FrameRecord(update.SerializeAsString());
  absl::MutexLock lock(&mu_);
  const int64_t sequence = ++appended_;
  pending_.push_back(Pending{sequence, new_segment_requested_, std::move(framed)});
  new_segment_requested_ = false;
  return sequence;
}

int64_t Journal::last_appended() const {
  absl::MutexLock lock(&mu_);
  return appended_;
}

void Journal::StartNewSegment() {
  absl::MutexLock lock(&mu_);
  new_segment_requested_ = true;
}

absl::Status Journal::health() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status Journal::Sync(int64_t sequence) {
  absl::MutexLock lock(&mu_);
  return FlushLocked(sequence, options_.fsync == FsyncPolicy::kAlways);
}

absl::Status Journal::FlushLocked(int64_t sequence, bool fsync) {
  while (true) {
    if (!error_.ok()) return error_;
    if (sequence > appended_) {
      return absl::InvalidArgumentError(absl::StrCat("journal: sequence ", sequence, " was never appended"));
    }
    if (written_ >= sequence && (!fsync || synced_ >= sequence)) return absl::OkStatus();
    if (writing_) {
      mu_.Await(absl::Condition(
          +[](bool* writing) { return !*writing; }, &writing_));
      continue;
    }
    // Become the writer: take everything queued (group commit).
    writing_ = true;
    std::vector<Pending> batch;
    batch.swap(pending_);
    const int64_t target = batch.empty() ? written_ : batch.back().sequence;
    mu_.Unlock();
    absl::Status status = WriteBatch(batch);
    if (status.ok() && fsync) status = SyncFd();
    mu_.Lock();
    writing_ = false;
    if (!status.ok()) {
      error_ = status;
      return status;
    }
    written_ = std::max(written_, target);
    if (fsync) synced_ = written_;
  }
}

absl::Status Journal::SyncFd() {
  if (fd_ < 0) return absl::OkStatus();
  if (::fdatasync(fd_) != 0) return ErrnoError("cannot fsync journal file", fd_path_);
  return absl::OkStatus();
}

absl::Status Journal::OpenSegment(int64_t first_sequence) {
  if (fd_ >= 0) {
    if (options_.fsync != FsyncPolicy::kNever) {
      if (auto s = SyncFd(); !s.ok()) return s;
    }
    ::close(fd_);
    fd_ = -1;
  }
  const std::string path = (fs::path(options_.dir) / SegmentFileName(first_sequence)).string();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create journal segment", path);
  fd_ = fd;
  fd_path_ = path;
  fd_offset_ = 0;
  if (auto s = WriteAll(fd_, kSegmentMagic, kMagicSize, path); !s.ok()) return s;
  fd_offset_ = kMagicSize;
  if (options_.fsync != FsyncPolicy::kNever) {
    if (auto s = SyncDirectory(options_.dir); !s.ok()) return s;
  }
  {
    absl::MutexLock lock(&mu_);
    segments_.emplace_back(first_sequence, path);
  }
  bytes_ = DirectoryBytes(options_.dir);
  return absl::OkStatus();
}

absl::Status Journal::WriteBatch(std::vector<Pending>& batch) {
  std::string buffer;
  auto flush_buffer = [&]() -> absl::Status {
    if (buffer.empty()) return absl::OkStatus();
    if (fd_ < 0) return absl::InternalError("journal: no open segment to write to");
    if (auto s = WriteAll(fd_, buffer.data(), buffer.size(), fd_path_); !s.ok()) return s;
    fd_offset_ += static_cast<int64_t>(buffer.size());
    bytes_ += static_cast<int64_t>(buffer.size());
    buffer.clear();
    return absl::OkStatus();
  };
  for (Pending& p : batch) {
    if (p.new_segment) {
      if (auto s = flush_buffer(); !s.ok()) return s;
      if (auto s = OpenSegment(p.sequence); !s.ok()) return s;
    }
    buffer += p.framed;
  }
  return flush_buffer();
}

absl::Status Journal::WriteSnapshot(const service::Snapshot& snapshot) {
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (snapshot_in_progress_) return absl::FailedPreconditionError("journal: a snapshot is already being written");
    snapshot_in_progress_ = true;
  }
  const int64_t sequence = snapshot.last_update_sequence();
  const std::string path = (fs::path(options_.dir) / SnapshotFileName(sequence)).string();
  const std::string tmp = path + ".tmp";
  absl::Status status = [&]() -> absl::Status {
    std::string contents(kSnapshotMagic, kMagicSize);
    contents += FrameRecord(snapshot.SerializeAsString());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("cannot create snapshot", tmp);
    absl::Status s = WriteAll(fd, contents.data(), contents.size(), tmp);
    if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("cannot fsync snapshot", tmp);
    ::close(fd);
    if (!s.ok()) return s;
    if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename snapshot into place", path);
    return SyncDirectory(options_.dir);
  }();
  std::vector<std::string> obsolete;
  {
    absl::MutexLock lock(&mu_);
    snapshot_in_progress_ = false;
    if (!status.ok()) return status;  // the old snapshot and segments still describe the state
    // Segments starting at or before `sequence` hold only updates the snapshot covers, because the
    // owner started a new segment right after `sequence`.
    std::vector<std::pair<int64_t, std::string>> kept;
    for (auto& seg : segments_) {
      if (seg.first <= sequence) {
        obsolete.push_back(seg.second);
      } else {
        kept.push_back(seg);
      }
    }
    segments_ = std::move(kept);
    if (!snapshot_path_.empty() && snapshot_path_ != path) obsolete.push_back(snapshot_path_);
    snapshot_path_ = path;
  }
  std::error_code ec;
  for (const auto& old : obsolete) fs::remove(old, ec);  // leftovers are skipped on replay
  bytes_ = DirectoryBytes(options_.dir);
  ++snapshots_written_;
  return absl::OkStatus();
}

void Journal::BatchLoop() {
  absl::MutexLock lock(&mu_);
  while (!closed_) {
    struct Due {
      Journal* j;
      bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return j->closed_ || (j->error_.ok() && j->appended_ - j->synced_ >= j->options_.batch_records);
      }
    } due{this};
    mu_.AwaitWithTimeout(absl::Condition(&due), options_.batch_interval);
    if (closed_) break;
    if (appended_ > synced_ && error_.ok()) (void)FlushLocked(appended_, /*fsync=*/true);
  }
}

absl::Status Journal::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return error_;
    closed_ = true;
  }
  if (batch_thread_.joinable()) batch_thread_.join();
  absl::MutexLock lock(&mu_);
  absl::Status status = FlushLocked(appended_, options_.fsync != FsyncPolicy::kNever);
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  return status;
}

}  // namespace sluice::dispatcher
