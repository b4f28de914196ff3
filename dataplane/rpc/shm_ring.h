// Same-host shared-memory transport for element payloads (docs/dataservice.md, "Same-host shared
// memory"): one ring per GetElements stream, in a file the worker creates under its shm directory
// (/dev/shm by default). The worker copies each large element's bytes into the ring and sends only
// (position, size) on the stream; the client hands its consumer a view into the ring (Hold), and
// reports how far it has consumed through the ring's header — up to the first byte an element it
// still holds occupies — so the worker can reuse the space. The gRPC stream keeps
// carrying everything else (element metadata, end of stream, errors), so delivery semantics do not
// change.
//
// File layout: a 4 KiB header page, then `data_bytes` of ring. The header holds a magic number, the
// sizes, a 16-byte random nonce (also sent to the client on the stream), and two words the client
// writes: `attached` (the nonce's first 8 bytes, written once it has mapped the file: the proof that
// the client opened this very file, i.e. shares the worker's /dev/shm) and `consumed` (ring position
// up to which the worker may overwrite). The client maps the header read-write and the data
// read-only. Positions are monotonic byte counts; a position's bytes are at position % data_bytes.
// An allocation never wraps: when it does not fit before the end, the end is skipped.
//
// The file is 0600, created with O_EXCL under an unguessable name
// (sluice-shm-<pid namespace>-<pid>-<32 hex>), and
// unlinked as soon as the client attached (both sides keep their mappings), or when the writer is
// destroyed; RemoveStaleShmRings removes those of dead processes (a worker killed before the
// client attached).
//
// Threading: a writer is used by one thread (the stream's sender); a reader by one thread (the
// stream's reader), except that held views may be dropped on any thread (the reader's lease
// bookkeeping is under its mutex). The cross-process words are accessed atomically.
#ifndef SLUICE_DATAPLANE_RPC_SHM_RING_H_
#define SLUICE_DATAPLANE_RPC_SHM_RING_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sluice::rpc {

// Elements whose encoded bytes are at most this size stay on the socket (small elements are framed
// into slabs and batched; a ring slot per element would not pay for itself).
inline constexpr uint64_t kShmMinElementBytes = 16 << 10;
inline constexpr uint64_t kShmHeaderBytes = 4096;
inline constexpr char kShmFilePrefix[] = "sluice-shm-";

// This machine's boot id (/proc/sys/kernel/random/boot_id, trimmed); empty when unreadable. The
// client offers it in GetElementsRequest.shm_boot_id; a worker with another boot id (another host)
// does not create a ring. Read once.
const std::string& ShmBootId();
// This process's pid namespace (the inode of /proc/self/ns/pid), which ring file names carry so
// that start-up cleanup judges only the pids of its own namespace ("0" when unreadable).
const std::string& ShmPidNamespace();

class ShmRingWriter {
 public:
  // Creates the ring file in `dir` with `data_bytes` of ring (rounded up to 4 KiB) and maps it.
  // Errors name the directory and the cause (not writable, no space, ...).
  static absl::StatusOr<std::unique_ptr<ShmRingWriter>> Create(const std::string& dir, uint64_t data_bytes);
  ~ShmRingWriter();  // unmaps; unlinks the file if the client never attached
  ShmRingWriter(const ShmRingWriter&) = delete;
  ShmRingWriter& operator=(const ShmRingWriter&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return kShmHeaderBytes + data_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  const std::string& nonce() const { return nonce_; }  // 16 bytes

  // Whether the client has attached. The first time it sees that, unlinks the file (nothing is
  // left behind whichever side dies next) and reserves the ring's memory (until then the file is
  // sparse: a client that never attaches, e.g. in another mount namespace, costs no memory).
  bool Attached();
  bool unlinked() const { return unlinked_; }
  // Why the ring cannot be used after attaching (the reservation failed: the shm directory's
  // filesystem is full); OK otherwise. Allocate then always returns nullopt.
  const absl::Status& reserve_status() const { return reserve_status_; }

  struct Slot {
    uint64_t position = 0;  // what the response carries as ElementData.shm_offset
    char* data = nullptr;   // `size` writable bytes
  };
  // Room for `size` bytes, or nullopt when the ring has not that much space free (the client has
  // not consumed enough; the caller sends the element as bytes instead) or size > data_bytes().
  std::optional<Slot> Allocate(uint64_t size);
  // How far the client reported consumed (clamped to what was allocated).
  uint64_t consumed();
  uint64_t allocated() const { return head_; }

 private:
  ShmRingWriter() = default;
  std::string path_;
  std::string nonce_;
  uint64_t data_bytes_ = 0;
  char* map_ = nullptr;
  int fd_ = -1;  // open until attached
  absl::Status reserve_status_;
  bool attached_ = false;
  bool unlinked_ = false;
  uint64_t head_ = 0;      // next free position (private to the worker: a client cannot move it)
  uint64_t consumed_ = 0;  // last value read from the header, monotonic
};

// Copies `n` bytes into ring memory with non-temporal (streaming) stores where the CPU has them
// (x86-64: SSE2), for the aligned middle of ranges of at least 4 KiB: the ring's slots are cold (a
// ring cycles through far more than the caches), so ordinary stores first read every destination
// line; streaming stores skip that (a 602 KB element: ~40 instead of ~67 us here). Call
// ShmRingStoreFence() after the last copy of an element, before announcing it.
void CopyIntoShmRing(char* dst, const char* src, size_t n);
// Makes the streaming stores before it visible before any later store (sfence).
void ShmRingStoreFence();

class ShmRingReader : public std::enable_shared_from_this<ShmRingReader> {
 public:
  // Opens the worker's ring file (read-write for the header words only), checks it is a ring of
  // `file_bytes` carrying `nonce`, maps it, and writes the attach word. Errors (another mount
  // namespace, other user, a file that is not the announced ring) mean: stay on the socket.
  // Shared: every view handed out by Hold keeps the reader (and so the mapping) alive.
  static absl::StatusOr<std::shared_ptr<ShmRingReader>> Attach(const std::string& path, uint64_t file_bytes,
                                                               absl::string_view nonce);
  ~ShmRingReader();  // unmaps
  ShmRingReader(const ShmRingReader&) = delete;
  ShmRingReader& operator=(const ShmRingReader&) = delete;

  // The `size` bytes at ring `position`, checked against the mapping: an InvalidArgument error
  // naming ElementData.shm_offset / shm_size when they do not lie inside the ring. Not reserved:
  // copy them out, then Release.
  absl::StatusOr<absl::string_view> View(uint64_t position, uint64_t size) const;

  // The same bytes, reserved for as long as `owner` (or any copy of it) lives: the worker does not
  // reuse them until it is dropped, on any thread. The data is mapped read-only (writing into it
  // faults). IsShmRingView(owner) is true. Holding many (or one for long) pins the ring: the
  // worker reuses space only up to the first byte of the oldest held slot, and sends what does not
  // fit as bytes.
  struct Held {
    absl::string_view bytes;
    std::shared_ptr<const void> owner;
  };
  absl::StatusOr<Held> Hold(uint64_t position, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);

  // The bytes up to `end` (a position just past bytes already copied out) are done with: the
  // worker may reuse the ring up to there, or up to the oldest slot still held, whichever is lower.
  // Only the attaching process tells the worker: a fork() child (e.g. a Python DataLoader worker)
  // dropping its copies of the parent's elements must not free slots the parent still reads.
  void Release(uint64_t end) ABSL_LOCKS_EXCLUDED(mu_);
  // Ring bytes the held slots keep from the worker: from the oldest held slot to the end of the
  // last slot held or released (0 when nothing is held).
  uint64_t held_span() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t held_slots() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  struct Lease;
  struct LeaseDeleter;
  using Slots = std::multimap<uint64_t, uint64_t>;  // held: position -> end

  friend bool IsShmRingView(const std::shared_ptr<const void>& owner);
  ShmRingReader() = default;
  void Drop(Slots::iterator slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes the consumed word: up to the oldest held slot, or to last_end_ when none is held.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  uint64_t data_bytes_ = 0;
  char* header_ = nullptr;      // read-write, kShmHeaderBytes
  const char* data_ = nullptr;  // read-only, data_bytes_
  mutable absl::Mutex mu_;
  Slots held_ ABSL_GUARDED_BY(mu_);
  pid_t owner_pid_ = 0;                        // the attaching process (not a fork of it)
  uint64_t last_end_ ABSL_GUARDED_BY(mu_) = 0;  // the furthest end held or released
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;  // the consumed word's value, monotonic
};

// Whether `owner` (a tensor buffer's owner) is a view into a shared-memory ring (ShmRingReader::
// Hold): read-only memory, which code handing writable memory to users must copy.
bool IsShmRingView(const std::shared_ptr<const void>& owner);

// Elements this process has received through rings (ShmRingReader::View and Hold calls that
// succeeded), and of those the ones held as views (Hold), for benchmarks and tests.
int64_t ShmElementsReceived();
int64_t ShmElementsHeld();

// Unlinks the ring files in `dir` whose creating process, in this pid namespace, no longer exists (a
// worker killed before its client attached). Returns how many it removed; files of live processes
// and of other pid namespaces (another container sharing the directory) are left alone.
int RemoveStaleShmRings(const std::string& dir);

}  // namespace sluice::rpc

#endif  // SLUICE_DATAPLANE_RPC_SHM_RING_H_
