#include "dataplane/worker/shm_stream.h"

#include <atomic>
#include <cstring>

#include "common/log.h"

namespace sluice::worker {
namespace {

std::atomic<bool> create_failure_logged{false};

// An element whose `framed` bytes (its shm entry) live in the same allocation.
struct ShmEntryElement {
  EncodedElement element;
  std::string framed;
};

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

}  // namespace

absl::Status PrepareShmDir(const ShmConfig& config) {
  if (!config.enabled()) return absl::OkStatus();
  const int removed = rpc::RemoveStaleShmRings(config.dir);
  if (removed > 0) {
    SLUICE_LOG(Info, "removed shared-memory rings of workers that are gone").With("shm_dir", config.dir).With("files", removed);
  }
  // A probe ring: the directory is writable and has room for a header page. (Dropped at once.)
  auto probe = rpc::ShmRingWriter::Create(config.dir, 4096);
  return probe.status();
}

std::unique_ptr<ShmStream> ShmStream::Open(const ShmConfig& config, const service::GetElementsRequest& request) {
  if (!config.enabled() || request.shm_boot_id().empty() || request.shm_boot_id() != rpc::ShmBootId()) return nullptr;
  auto ring = rpc::ShmRingWriter::Create(config.dir, config.ring_bytes);
  if (!ring.ok()) {
    const char* what = "shared memory unavailable for a stream; sending its elements over the socket";
    const std::string error(ring.status().message());
    if (!create_failure_logged.exchange(true)) {
      SLUICE_LOG(Warning, what).With("shm_dir", config.dir).With("task_id", request.task_id()).With("error", error);
    } else {
      SLUICE_LOG(Debug, what).With("shm_dir", config.dir).With("task_id", request.task_id()).With("error", error);
    }
    return nullptr;
  }
  return std::make_unique<ShmStream>(*std::move(ring));
}

ElementsResponse ShmStream::Hello() const {
  service::ShmRing ring;
  ring.set_path(ring_->path());
  ring.set_file_bytes(ring_->file_bytes());
  ring.set_nonce(ring_->nonce());
  const std::string body = ring.SerializeAsString();
  auto entry = std::make_shared<ShmEntryElement>();
  entry->framed.push_back(static_cast<char>((4 << 3) | 2));  // GetElementsResponse.shm_ring
  PutVarint(&entry->framed, body.size());
  entry->framed += body;
  entry->element.framed = entry->framed;
  ElementsResponse hello;
  hello.elements.push_back(EncodedElementPtr(entry, &entry->element));
  return hello;
}

std::string FrameShmEntry(const EncodedElement& element, uint64_t position) {
  service::ElementData data;
  data.set_compression(ToCompression(element.codec));
  data.set_uncompressed_size(element.uncompressed_size);
  data.set_shm_offset(position);
  data.set_shm_size(element.size());
  const std::string body = data.SerializeAsString();
  std::string out;
  out.reserve(body.size() + 12);
  out.push_back(static_cast<char>((1 << 3) | 2));  // GetElementsResponse.elements
  PutVarint(&out, body.size());
  out += body;
  return out;
}

void ShmStream::Divert(ElementsResponse& response) {
  if (!ring_->Attached()) return;
  if (!ring_->reserve_status().ok()) {
    if (!reserve_logged_) {
      reserve_logged_ = true;
      SLUICE_LOG(Warning, "shared-memory ring cannot be reserved; sending this stream's elements over the socket")
          .With("error", std::string(ring_->reserve_status().message()));
    }
    return;
  }
  for (EncodedElementPtr& e : response.elements) {
    if (!e->framed.empty() || e->size() <= rpc::kShmMinElementBytes) continue;
    std::optional<rpc::ShmRingWriter::Slot> slot = ring_->Allocate(e->size());
    if (!slot.has_value()) {
      ++fallbacks_;
      continue;
    }
    char* out = slot->data;
    for (const pipeline::WireBytes::Range& r : e->bytes.ranges()) {
      rpc::CopyIntoShmRing(out, r.data, r.size);
      out += r.size;
    }
    rpc::ShmRingStoreFence();  // the bytes are in place before the entry announcing them is sent
    auto entry = std::make_shared<ShmEntryElement>();
    entry->framed = FrameShmEntry(*e, slot->position);
    entry->element.codec = e->codec;
    entry->element.uncompressed_size = e->uncompressed_size;
    entry->element.framed = entry->framed;
    e = EncodedElementPtr(entry, &entry->element);
    ++diverted_;
  }
}

}  // namespace sluice::worker
