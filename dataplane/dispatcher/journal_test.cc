#include "dataplane/dispatcher/journal.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

namespace fs = std::filesystem;
using service::Update;
using sluice::testing::ReadFile;
using sluice::testing::TempDir;
using sluice::testing::WriteFile;

Update Numbered(int i) {
  Update u;
  u.mutable_register_worker()->set_worker_address(absl::StrCat("w", i));
  return u;
}
int NumberOf(const Update& u) { return std::stoi(u.register_worker().worker_address().substr(1)); }

std::unique_ptr<Journal> OpenOrDie(const std::string& dir, JournalContents* contents,
                                   FsyncPolicy fsync = FsyncPolicy::kAlways) {
  JournalOptions options;
  options.dir = dir;
  options.fsync = fsync;
  auto journal = Journal::Open(options, contents);
  INFO(journal.status().ToString());
  REQUIRE(journal.ok());
  return std::move(*journal);
}

// Appends updates first..last (inclusive) and syncs them.
void AppendRange(Journal& journal, int first, int last) {
  int64_t seq = 0;
  for (int i = first; i <= last; ++i) seq = journal.Append(Numbered(i));
  REQUIRE(journal.Sync(seq).ok());
}

std::vector<int> Numbers(const JournalContents& c) {
  std::vector<int> out;
  for (const auto& u : c.updates) out.push_back(NumberOf(u));
  return out;
}
std::vector<int> Iota(int first, int last) {
  std::vector<int> out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

std::string OnlySegment(const std::string& dir) {
  std::vector<std::string> segments;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("journal-", 0) == 0) segments.push_back(e.path().string());
  }
  REQUIRE(segments.size() == 1);
  return segments[0];
}

// Byte offset of record `n` (0-based) in a segment of Numbered() updates.
int64_t RecordOffset(const std::string& data, int n) {
  int64_t offset = kMagicSize;
  for (int i = 0; i < n; ++i) {
    uint64_t length = 0;
    for (int b = 7; b >= 0; --b) length = (length << 8) | static_cast<uint8_t>(data[offset + b]);
    offset += 12 + static_cast<int64_t>(length) + 4;
  }
  return offset;
}

TEST_CASE("framing matches the TFRecord layout") {
  std::string framed = FrameRecord("abc");
  REQUIRE(framed.size() == 8 + 4 + 3 + 4);
  CHECK(framed[0] == 3);
  CHECK(framed.substr(12, 3) == "abc");
  CHECK(SegmentFileName(7) == "journal-00000000000000000007.log");
  CHECK(SnapshotFileName(12) == "snapshot-00000000000000000012.snap");
  CHECK(ParseFsyncPolicy("batch").value() == FsyncPolicy::kBatch);
  CHECK(!ParseFsyncPolicy("sometimes").ok());
}

TEST_CASE("appended updates replay in order across restarts") {
  for (FsyncPolicy policy : {FsyncPolicy::kAlways, FsyncPolicy::kBatch, FsyncPolicy::kNever}) {
    TempDir dir;
    JournalContents contents;
    {
      auto journal = OpenOrDie(dir.path().string(), &contents, policy);
      CHECK(contents.updates.empty());
      AppendRange(*journal, 1, 50);
      CHECK(journal->last_appended() == 50);
      CHECK(journal->bytes() > 50 * 12);
    }
    {
      auto journal = OpenOrDie(dir.path().string(), &contents, policy);
      CHECK(Numbers(contents) == Iota(1, 50));
      CHECK(contents.last_sequence == 50);
      CHECK(journal->last_appended() == 50);
      // Appends without an explicit Sync are written by Close.
      for (int i = 51; i <= 60; ++i) journal->Append(Numbered(i));
    }
    auto read = Journal::Read(dir.path().string());
    REQUIRE(read.ok());
    CHECK(Numbers(*read) == Iota(1, 60));
    CHECK(read->segment_files.size() == 2);  // every open starts a new segment
    CHECK(read->torn_file.empty());
  }
}

TEST_CASE("a missing directory reads as empty") {
  TempDir dir;
  auto read = Journal::Read(dir.File("nothing-here"));
  REQUIRE(read.ok());
  CHECK(read->updates.empty());
  CHECK(read->last_sequence == 0);
}

TEST_CASE("a torn tail is dropped, reported and truncated away") {
  TempDir dir;
  JournalContents contents;
  { AppendRange(*OpenOrDie(dir.path().string(), &contents), 1, 10); }
  const std::string segment = OnlySegment(dir.path().string());
  const std::string data = ReadFile(segment);
  const int64_t last_record = RecordOffset(data, 9);

  SECTION("cut inside the last record") {
    WriteFile(segment, data.substr(0, data.size() - 3));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(read.ok());
    CHECK(Numbers(*read) == Iota(1, 9));
    CHECK(read->torn_file == segment);
    CHECK(read->torn_offset == last_record);
    CHECK(read->dropped_bytes == static_cast<int64_t>(data.size()) - 3 - last_record);
    CHECK(read->torn_reason == "record cut short");
  }
  SECTION("cut inside a record header") {
    WriteFile(segment, data.substr(0, last_record + 5));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(read.ok());
    CHECK(Numbers(*read) == Iota(1, 9));
    CHECK(read->torn_reason == "record header cut short");
  }
  SECTION("a zero-filled tail (space allocated, never written)") {
    WriteFile(segment, data + std::string(100, '\0'));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(read.ok());
    CHECK(Numbers(*read) == Iota(1, 10));
    CHECK(read->torn_reason == "zero-filled tail");
    CHECK(read->dropped_bytes == 100);
  }
  SECTION("a complete last record with a bad checksum") {
    std::string bad = data;
    bad[bad.size() - 6] ^= 0x40;
    WriteFile(segment, bad);
    auto read = Journal::Read(dir.path().string());
    REQUIRE(read.ok());
    CHECK(Numbers(*read) == Iota(1, 9));
    CHECK(read->torn_reason == "last record's checksum mismatch");
  }
  // Open truncates the tail, so appending continues cleanly after record 9 or 10.
  auto journal = OpenOrDie(dir.path().string(), &contents);
  CHECK(!contents.torn_file.empty());
  const int last = static_cast<int>(contents.last_sequence);
  AppendRange(*journal, last + 1, last + 5);
  journal.reset();
  auto read = Journal::Read(dir.path().string());
  REQUIRE(read.ok());
  CHECK(read->torn_file.empty());
  CHECK(Numbers(*read) == Iota(1, last + 5));
}

TEST_CASE("a segment cut inside its header is an empty torn tail") {
  TempDir dir;
  WriteFile(dir.File(SegmentFileName(1)), "SLJR");
  auto read = Journal::Read(dir.path().string());
  REQUIRE(read.ok());
  CHECK(read->updates.empty());
  CHECK(read->torn_offset == 0);
  JournalContents contents;
  auto journal = OpenOrDie(dir.path().string(), &contents);
  AppendRange(*journal, 1, 2);
  journal.reset();
  CHECK(Numbers(*Journal::Read(dir.path().string())) == Iota(1, 2));
}

TEST_CASE("a segment with its header and no record (killed right after opening it) is replaced") {
  // The crash state found by e2e_dataplane_dispatcher_binary_test (about 1 run in 30 under load): a
  // snapshot at S, segment S+1 created with its header, the process killed before record S+1. The
  // restarted journal wanted to create segment S+1 again and failed every write with "File exists".
  TempDir dir;
  JournalContents contents;
  {
    auto journal = OpenOrDie(dir.path().string(), &contents);
    AppendRange(*journal, 1, 3);
  }
  WriteFile(dir.File(SegmentFileName(4)), std::string(kSegmentMagic, kMagicSize));
  auto read = Journal::Read(dir.path().string());
  REQUIRE(read.ok());
  CHECK(read->last_sequence == 3);
  CHECK(read->torn_file.empty());  // a whole header and nothing after it: not torn, just empty
  {
    auto journal = OpenOrDie(dir.path().string(), &contents);
    CHECK(contents.last_sequence == 3);
    const int64_t seq = journal->Append(Numbered(4));
    CHECK(seq == 4);
    absl::Status synced = journal->Sync(seq);
    INFO(synced.ToString());
    CHECK(synced.ok());
  }
  auto after = Journal::Read(dir.path().string());
  REQUIRE(after.ok());
  CHECK(Numbers(*after) == Iota(1, 4));
}

TEST_CASE("damage in the middle is an error naming file and offset") {
  TempDir dir;
  JournalContents contents;
  { AppendRange(*OpenOrDie(dir.path().string(), &contents), 1, 10); }
  const std::string segment = OnlySegment(dir.path().string());
  const std::string data = ReadFile(segment);
  const int64_t third = RecordOffset(data, 2);

  SECTION("data checksum") {
    std::string bad = data;
    bad[third + 14] ^= 0x01;
    WriteFile(segment, bad);
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    const std::string msg(read.status().message());
    CHECK(msg.find(segment) != std::string::npos);
    CHECK(msg.find(absl::StrCat("offset ", third, ": record data checksum mismatch")) != std::string::npos);
  }
  SECTION("length checksum") {
    std::string bad = data;
    bad[third] ^= 0x01;
    WriteFile(segment, bad);
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find(absl::StrCat("offset ", third, ": record length checksum")) !=
          std::string::npos);
  }
  SECTION("bad header") {
    std::string bad = data;
    bad[0] = 'X';
    WriteFile(segment, bad);
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find("offset 0: not a Sluice journal file") != std::string::npos);
  }
  SECTION("a valid frame around bytes that are not an Update") {
    std::string bad = data.substr(0, third) + FrameRecord(std::string("\xff\xff\xff", 3)) + data.substr(third);
    WriteFile(segment, bad);
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find("does not parse as an Update") != std::string::npos);
  }
  SECTION("a torn record in a segment that is not the last") {
    WriteFile(segment, data.substr(0, data.size() - 2));
    JournalContents ignored;
    auto journal = Journal::Open(JournalOptions{dir.path().string()}, &ignored);  // truncates the tail ...
    REQUIRE(journal.ok());
    AppendRange(**journal, 10, 12);
    journal->reset();
    // ... so damage it again: now the torn segment is followed by another one.
    WriteFile(segment, ReadFile(segment).substr(0, RecordOffset(data, 9) - 2));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find("only the last journal segment may end in a torn record") !=
          std::string::npos);
  }
  // Open refuses too, leaving the files alone.
  JournalContents ignored;
  CHECK(!Journal::Open(JournalOptions{dir.path().string()}, &ignored).ok());
}

TEST_CASE("snapshots replace the segments before them") {
  TempDir dir;
  JournalContents contents;
  auto journal = OpenOrDie(dir.path().string(), &contents);
  AppendRange(*journal, 1, 200);
  journal->StartNewSegment();
  service::Snapshot snapshot;
  snapshot.set_last_update_sequence(200);
  *snapshot.add_updates() = Numbered(1000);
  AppendRange(*journal, 201, 205);  // after the cut, before the snapshot is written
  REQUIRE(journal->WriteSnapshot(snapshot).ok());
  CHECK(journal->snapshots_written() == 1);
  AppendRange(*journal, 206, 210);
  const int64_t bytes = journal->bytes();
  journal.reset();

  auto read = Journal::Read(dir.path().string());
  REQUIRE(read.ok());
  REQUIRE(read->snapshot.has_value());
  CHECK(read->snapshot->last_update_sequence() == 200);
  CHECK(NumberOf(read->snapshot->updates(0)) == 1000);
  CHECK(Numbers(*read) == Iota(201, 210));
  CHECK(read->records_read == 10);
  CHECK(read->segment_files.size() == 1);
  CHECK(bytes < 2000);

  SECTION("segments left behind by a crash before deletion are skipped unread") {
    // Recreate an obsolete segment with 200 records.
    {
      TempDir other;
      JournalContents c;
      AppendRange(*OpenOrDie(other.path().string(), &c), 1, 200);
      fs::copy_file(OnlySegment(other.path().string()), dir.File(SegmentFileName(1)));
    }
    auto again = Journal::Read(dir.path().string());
    REQUIRE(again.ok());
    CHECK(Numbers(*again) == Iota(201, 210));
    CHECK(again->records_read == 10);
  }
  SECTION("a corrupt snapshot is an error naming it") {
    const std::string snap = dir.File(SnapshotFileName(200));
    std::string bad = ReadFile(snap);
    bad[bad.size() - 10] ^= 0x10;
    WriteFile(snap, bad);
    auto again = Journal::Read(dir.path().string());
    REQUIRE(!again.ok());
    CHECK(std::string(again.status().message()).find(snap) != std::string::npos);
  }
  SECTION("an interrupted snapshot (temp file) is ignored and removed") {
    WriteFile(dir.File(SnapshotFileName(300) + ".tmp"), "partial");
    JournalContents c;
    auto reopened = OpenOrDie(dir.path().string(), &c);
    CHECK(Numbers(c) == Iota(201, 210));
    CHECK(!fs::exists(dir.File(SnapshotFileName(300) + ".tmp")));
  }
}

TEST_CASE("missing segments are detected") {
  TempDir dir;
  JournalContents contents;
  { AppendRange(*OpenOrDie(dir.path().string(), &contents), 1, 5); }
  { AppendRange(*OpenOrDie(dir.path().string(), &contents), 6, 10); }
  { AppendRange(*OpenOrDie(dir.path().string(), &contents), 11, 15); }
  SECTION("in the middle") {
    fs::remove(dir.File(SegmentFileName(6)));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find("journal gap: expected update 6") != std::string::npos);
  }
  SECTION("at the start, without a snapshot") {
    fs::remove(dir.File(SegmentFileName(1)));
    auto read = Journal::Read(dir.path().string());
    REQUIRE(!read.ok());
    CHECK(std::string(read.status().message()).find("there is no snapshot") != std::string::npos);
  }
}

TEST_CASE("concurrent appenders share group commits and keep their order") {
  TempDir dir;
  JournalContents contents;
  auto journal = OpenOrDie(dir.path().string(), &contents, FsyncPolicy::kAlways);
  constexpr int kThreads = 6;
  constexpr int kPerThread = 100;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};  // Catch2 assertions are not thread-safe
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int64_t seq = journal->Append(Numbered(t * 1000 + i));
        if (!journal->Sync(seq).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  journal.reset();
  auto read = Journal::Read(dir.path().string());
  REQUIRE(read.ok());
  REQUIRE(read->updates.size() == kThreads * kPerThread);
  std::vector<int> next(kThreads, 0);
  for (const auto& u : read->updates) {
    const int n = NumberOf(u);
    CHECK(n % 1000 == next[n / 1000]++);
  }
}

TEST_CASE("a write error is sticky") {
  TempDir dir;
  const std::string sub = dir.File("journal");
  JournalContents contents;
  auto journal = OpenOrDie(sub, &contents);
  fs::remove_all(sub);  // the next segment cannot be created
  const int64_t seq = journal->Append(Numbered(1));
  absl::Status first = journal->Sync(seq);
  CHECK(!first.ok());
  CHECK(std::string(first.message()).find("cannot create journal segment") != std::string::npos);
  CHECK(!journal->health().ok());
  CHECK(!journal->Sync(seq).ok());
  CHECK(journal->Sync(journal->Append(Numbered(2))).code() == first.code());
}

TEST_CASE("Sync of a sequence never appended is an error") {
  TempDir dir;
  JournalContents contents;
  auto journal = OpenOrDie(dir.path().string(), &contents);
  CHECK(journal->Sync(5).code() == absl::StatusCode::kInvalidArgument);
  CHECK(journal->Sync(0).ok());
}

}  // namespace
}  // namespace sluice::dispatcher
