#include "dataplane/rpc/shm_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::rpc {
namespace {

constexpr uint64_t kMagic = 0x31474e4952534c53;  // "SLSRING1"
constexpr uint64_t kPage = 4096;
constexpr uint64_t kAlign = 64;

// The header page. The worker writes magic..nonce before anyone can see the file's name; the
// client writes `attached` and `consumed` (on their own cache lines).
struct Header {
  uint64_t magic;
  uint64_t data_bytes;
  char nonce[16];
  alignas(64) uint64_t attached;
  alignas(64) uint64_t consumed;
};
static_assert(sizeof(Header) <= kShmHeaderBytes);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free, "cross-process words need lock-free atomics");

std::atomic<int64_t> elements_received{0};
std::atomic<int64_t> elements_held{0};

uint64_t NonceWord(absl::string_view nonce) {
  uint64_t w = 0;
  std::memcpy(&w, nonce.data(), std::min(nonce.size(), sizeof(w)));
  return w | 1;  // never 0, the unattached value
}

std::string Errno(int e) { return std::strerror(e); }

}  // namespace

const std::string& ShmBootId() {
  static const std::string* id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(in, s);
    return new std::string(absl::StripAsciiWhitespace(s));
  }();
  return *id;
}

const std::string& ShmPidNamespace() {
  static const std::string* ns = [] {
    struct stat st;
    return new std::string(stat("/proc/self/ns/pid", &st) == 0 ? absl::StrCat(st.st_ino) : "0");
  }();
  return *ns;
}

// ---------------------------------------------------------------- writer

absl::StatusOr<std::unique_ptr<ShmRingWriter>> ShmRingWriter::Create(const std::string& dir, uint64_t data_bytes) {
  if (data_bytes == 0) return absl::InvalidArgumentError("shared-memory ring: size 0");
  data_bytes = (data_bytes + kPage - 1) / kPage * kPage;
  char random[16];
  if (getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    return absl::UnavailableError(absl::StrCat("shared-memory ring: getrandom failed: ", Errno(errno)));
  }
  std::unique_ptr<ShmRingWriter> w(new ShmRingWriter());
  w->nonce_.assign(random, sizeof(random));
  w->data_bytes_ = data_bytes;
  w->path_ = absl::StrCat(dir, "/", kShmFilePrefix, ShmPidNamespace(), "-", getpid(), "-",
                          absl::BytesToHexString(w->nonce_));
  const int fd = open(w->path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a shared-memory ring in ", dir, ": ", Errno(errno)));
  }
  const uint64_t file_bytes = kShmHeaderBytes + data_bytes;
  // Sparse until the client attaches; the header page is reserved now (posix_fallocate), so a full
  // filesystem fails here rather than with SIGBUS on the first write.
  int err = ftruncate(fd, static_cast<off_t>(file_bytes)) == 0 ? 0 : errno;
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(kShmHeaderBytes));
  void* map = MAP_FAILED;
  if (err == 0) {
    map = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) err = errno;
  }
  if (err != 0) {
    close(fd);
    unlink(w->path_.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot size a shared-memory ring of ", file_bytes, " bytes in ",
                                                     dir, ": ", Errno(err)));
  }
  w->fd_ = fd;
  w->map_ = static_cast<char*>(map);
  auto* h = reinterpret_cast<Header*>(w->map_);
  h->magic = kMagic;
  h->data_bytes = data_bytes;
  std::memcpy(h->nonce, random, sizeof(random));
  std::atomic_ref<uint64_t>(h->attached).store(0, std::memory_order_release);
  std::atomic_ref<uint64_t>(h->consumed).store(0, std::memory_order_release);
  return w;
}

ShmRingWriter::~ShmRingWriter() {
  if (fd_ >= 0) close(fd_);
  if (map_ != nullptr) munmap(map_, file_bytes());
  if (!unlinked_) unlink(path_.c_str());
}

bool ShmRingWriter::Attached() {
  if (attached_) return true;
  auto* h = reinterpret_cast<Header*>(map_);
  if (std::atomic_ref<uint64_t>(h->attached).load(std::memory_order_acquire) != NonceWord(nonce_)) return false;
  attached_ = true;
  unlinked_ = unlink(path_.c_str()) == 0 || errno == ENOENT;
  // Reserve the ring's pages now: a full filesystem is an error here, not SIGBUS on a write.
  const int err = posix_fallocate(fd_, static_cast<off_t>(kShmHeaderBytes), static_cast<off_t>(data_bytes_));
  if (err != 0) {
    reserve_status_ = absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve the ", data_bytes_, "-byte shared-memory ring ", path_, ": ", Errno(err)));
  }
  close(fd_);
  fd_ = -1;
  return true;
}

uint64_t ShmRingWriter::consumed() {
  auto* h = reinterpret_cast<Header*>(map_);
  uint64_t c = std::atomic_ref<uint64_t>(h->consumed).load(std::memory_order_acquire);
  // The client releases the end of an element's bytes; its slot ends at the next aligned position
  // (slots start aligned), where the next slot starts.
  c = c > ~uint64_t{0} - kAlign ? c : (c + kAlign - 1) / kAlign * kAlign;
  // A client can only claim what was allocated, and never take back what it released.
  if (c > consumed_) consumed_ = std::min(c, head_);
  return consumed_;
}

std::optional<ShmRingWriter::Slot> ShmRingWriter::Allocate(uint64_t size) {
  const uint64_t aligned = (size + kAlign - 1) / kAlign * kAlign;
  if (!attached_ || !reserve_status_.ok() || size == 0 || aligned > data_bytes_) return std::nullopt;
  uint64_t position = head_;
  const uint64_t offset = position % data_bytes_;
  if (offset + aligned > data_bytes_) position += data_bytes_ - offset;  // skip the end: no wrapping slot
  if (position + aligned - consumed() > data_bytes_) return std::nullopt;
  head_ = position + aligned;
  return Slot{position, map_ + kShmHeaderBytes + position % data_bytes_};
}

void CopyIntoShmRing(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  constexpr size_t kMinStreamed = 4096;
  if (n >= kMinStreamed) {
    const size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
    }
  }
#endif
  std::memcpy(dst, src, n);
}

void ShmRingStoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// ---------------------------------------------------------------- reader

absl::StatusOr<std::shared_ptr<ShmRingReader>> ShmRingReader::Attach(const std::string& path, uint64_t file_bytes,
                                                                     absl::string_view nonce) {
  const std::string base = path.substr(path.rfind('/') + 1);
  if (base.rfind(kShmFilePrefix, 0) != 0 || path.find("/../") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("ShmRing.path '", path, "' is not a shared-memory ring file"));
  }
  if (nonce.size() != 16) return absl::InvalidArgumentError("ShmRing.nonce must be 16 bytes");
  if (file_bytes <= kShmHeaderBytes || (file_bytes - kShmHeaderBytes) % kPage != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ShmRing.file_bytes ", file_bytes, " is not a ring's size"));
  }
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open the worker's shared-memory ring ", path, ": ", Errno(errno),
                                            " (not the same /dev/shm, or another user)"));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != file_bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory ring ", path, " is not a regular file of ShmRing.file_bytes ", file_bytes));
  }
  const uint64_t data_bytes = file_bytes - kShmHeaderBytes;
  void* header = mmap(nullptr, kShmHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* data = header == MAP_FAILED ? MAP_FAILED
                                    : mmap(nullptr, data_bytes, PROT_READ, MAP_SHARED, fd,
                                           static_cast<off_t>(kShmHeaderBytes));
  const int err = errno;
  close(fd);  // the mappings keep the file
  if (data == MAP_FAILED) {
    if (header != MAP_FAILED) munmap(header, kShmHeaderBytes);
    return absl::UnavailableError(absl::StrCat("cannot map shared-memory ring ", path, ": ", Errno(err)));
  }
  std::shared_ptr<ShmRingReader> r(new ShmRingReader());
  r->header_ = static_cast<char*>(header);
  r->data_ = static_cast<const char*>(data);
  r->data_bytes_ = data_bytes;
  r->owner_pid_ = getpid();
  auto* h = reinterpret_cast<Header*>(r->header_);
  if (h->magic != kMagic || h->data_bytes != data_bytes || std::memcmp(h->nonce, nonce.data(), 16) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory ring ", path, " does not carry the stream's ShmRing.nonce (another file)"));
  }
  std::atomic_ref<uint64_t>(h->attached).store(NonceWord(nonce), std::memory_order_release);
  return r;
}

ShmRingReader::~ShmRingReader() {
  if (data_ != nullptr) munmap(const_cast<char*>(data_), data_bytes_);
  if (header_ != nullptr) munmap(header_, kShmHeaderBytes);
}

absl::StatusOr<absl::string_view> ShmRingReader::View(uint64_t position, uint64_t size) const {
  const uint64_t offset = position % data_bytes_;
  if (size == 0 || size > data_bytes_ || offset > data_bytes_ - size) {
    return absl::InvalidArgumentError(absl::StrCat("ElementData.shm_offset ", position, " (ring offset ", offset,
                                                   ") with shm_size ", size, " does not lie inside the ",
                                                   data_bytes_, "-byte shared-memory ring"));
  }
  elements_received.fetch_add(1, std::memory_order_relaxed);
  return absl::string_view(data_ + offset, size);
}

int64_t ShmElementsReceived() { return elements_received.load(std::memory_order_relaxed); }
int64_t ShmElementsHeld() { return elements_held.load(std::memory_order_relaxed); }

// A held slot: keeps the reader (its mapping) alive and the slot's bytes from the worker.
struct ShmRingReader::Lease {
  std::shared_ptr<ShmRingReader> ring;
  Slots::iterator slot;
};

struct ShmRingReader::LeaseDeleter {
  void operator()(const void* p) const {
    std::unique_ptr<Lease> lease(static_cast<Lease*>(const_cast<void*>(p)));
    lease->ring->Drop(lease->slot);
  }
};

absl::StatusOr<ShmRingReader::Held> ShmRingReader::Hold(uint64_t position, uint64_t size) {
  absl::StatusOr<absl::string_view> bytes = View(position, size);
  if (!bytes.ok()) return bytes.status();
  auto lease = std::make_unique<Lease>();
  lease->ring = shared_from_this();
  {
    absl::MutexLock l(&mu_);
    lease->slot = held_.emplace(position, position + size);
    last_end_ = std::max(last_end_, position + size);
  }
  elements_held.fetch_add(1, std::memory_order_relaxed);
  const void* raw = lease.release();
  return Held{*bytes, std::shared_ptr<const void>(raw, LeaseDeleter{})};
}

bool IsShmRingView(const std::shared_ptr<const void>& owner) {
  return std::get_deleter<ShmRingReader::LeaseDeleter>(owner) != nullptr;
}

void ShmRingReader::Drop(Slots::iterator slot) {
  absl::MutexLock l(&mu_);
  held_.erase(slot);
  PublishLocked();
}

void ShmRingReader::Release(uint64_t end) {
  absl::MutexLock l(&mu_);
  last_end_ = std::max(last_end_, end);
  PublishLocked();
}

void ShmRingReader::PublishLocked() {
  // Positions come in ring order, so nothing not yet received lies below last_end_; a held slot
  // keeps everything from its start.
  const uint64_t end = held_.empty() ? last_end_ : held_.begin()->first;
  if (end <= released_ || getpid() != owner_pid_) return;
  released_ = end;
  auto* h = reinterpret_cast<Header*>(header_);
  std::atomic_ref<uint64_t>(h->consumed).store(end, std::memory_order_release);
}

uint64_t ShmRingReader::held_span() const {
  absl::MutexLock l(&mu_);
  return held_.empty() ? 0 : last_end_ - held_.begin()->first;
}

int64_t ShmRingReader::held_slots() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(held_.size());
}

int RemoveStaleShmRings(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  const size_t prefix = std::strlen(kShmFilePrefix);
  while (dirent* e = readdir(d)) {
    const absl::string_view name(e->d_name);
    if (name.substr(0, prefix) != kShmFilePrefix) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name.substr(prefix), '-');
    int pid = 0;
    if (parts.size() != 3 || parts[0] != ShmPidNamespace() || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (unlink(absl::StrCat(dir, "/", name).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace sluice::rpc
