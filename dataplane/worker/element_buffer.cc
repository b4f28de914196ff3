#include "dataplane/worker/element_buffer.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"

namespace sluice::worker {

absl::StatusOr<std::optional<pipeline::Codec>> CodecFor(service::Compression compression) {
  switch (compression) {
    case service::COMPRESSION_AUTO: return std::optional<pipeline::Codec>();
    case service::COMPRESSION_NONE: return std::optional<pipeline::Codec>(pipeline::Codec::kNone);
    case service::COMPRESSION_LZ4: return std::optional<pipeline::Codec>(pipeline::Codec::kLz4);
    case service::COMPRESSION_ZSTD: return std::optional<pipeline::Codec>(pipeline::Codec::kZstd);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "compression: unknown value ", static_cast<int>(compression),
          "; use COMPRESSION_AUTO (0), COMPRESSION_NONE (1), COMPRESSION_LZ4 (2) or COMPRESSION_ZSTD (3)"));
  }
}

service::Compression ToCompression(pipeline::Codec codec) {
  switch (codec) {
    case pipeline::Codec::kNone: return service::COMPRESSION_NONE;
    case pipeline::Codec::kLz4: return service::COMPRESSION_LZ4;
    case pipeline::Codec::kZstd: return service::COMPRESSION_ZSTD;
  }
  return service::COMPRESSION_NONE;
}

absl::StatusOr<EncodedElementPtr> EncodeForWire(const pipeline::Element& element, service::Compression compression) {
  auto wanted = CodecFor(compression);
  if (!wanted.ok()) return wanted.status();
  auto out = std::make_shared<EncodedElement>();
  pipeline::WireBytes raw = pipeline::EncodeElementWire(element);
  out->uncompressed_size = raw.size();
  out->codec = wanted->has_value() ? **wanted : pipeline::ChooseCodec(raw);
  if (out->codec == pipeline::Codec::kNone) {
    out->bytes = std::move(raw);
  } else {
    auto compressed = pipeline::Compress(std::move(raw).Flatten(), out->codec);
    if (!compressed.ok()) return compressed.status();
    out->bytes = pipeline::WireBytes::FromString(*std::move(compressed));
  }
  return out;
}

absl::StatusOr<EncodedElementPtr> Recode(EncodedElementPtr element, std::optional<pipeline::Codec> wanted) {
  if (!wanted.has_value() || *wanted == element->codec) return element;
  std::string raw;
  if (element->codec == pipeline::Codec::kNone) {
    raw = element->bytes.Flatten();
  } else {
    auto decompressed = pipeline::Decompress(element->bytes.Flatten(), element->codec, element->uncompressed_size);
    if (!decompressed.ok()) return decompressed.status();
    raw = *std::move(decompressed);
  }
  auto out = std::make_shared<EncodedElement>();
  out->codec = *wanted;
  out->uncompressed_size = element->uncompressed_size;
  if (*wanted != pipeline::Codec::kNone) {
    auto compressed = pipeline::Compress(raw, *wanted);
    if (!compressed.ok()) return compressed.status();
    raw = *std::move(compressed);
  }
  out->bytes = pipeline::WireBytes::FromString(std::move(raw));
  return out;
}

absl::Status FillElementData(EncodedElementPtr element, std::optional<pipeline::Codec> wanted,
                             service::ElementData* out) {
  auto recoded = Recode(std::move(element), wanted);
  if (!recoded.ok()) return recoded.status();
  *out->mutable_data() = (*recoded)->bytes.Flatten();
  out->set_compression(ToCompression((*recoded)->codec));
  out->set_uncompressed_size((*recoded)->uncompressed_size);
  return absl::OkStatus();
}

bool ProducerMayResume(size_t queued, size_t queued_bytes, size_t incoming_bytes, size_t max_elements,
                       size_t max_bytes) {
  if (queued == 0) return true;
  return queued <= max_elements / 2 && queued_bytes <= max_bytes / 2 && queued_bytes + incoming_bytes <= max_bytes;
}

ElementBuffer::ElementBuffer(size_t max_elements, size_t max_bytes, size_t min_bytes)
    : max_elements_(std::max<size_t>(1, max_elements)), max_bytes_(std::max<size_t>(1, max_bytes)), min_bytes_(min_bytes) {}

size_t ElementBuffer::ElementBoundLocked() const {
  if (min_bytes_ == 0 || pushed_elements_ == 0) return max_elements_;
  const uint64_t mean = std::max<uint64_t>(1, pushed_bytes_ / pushed_elements_);
  return std::max<size_t>(max_elements_, std::min<uint64_t>(min_bytes_ / mean, kMaxElementBound));
}

size_t ElementBuffer::element_bound() const {
  absl::MutexLock lock(&mu_);
  return ElementBoundLocked();
}

bool ElementBuffer::Push(EncodedElementPtr element, CancelToken* cancel) {
  const size_t size = element->size();
  // Uncompressed: a reader asking for another codec gets them decompressed, and a response packs
  // up to element_bound() of them.
  const uint64_t mean_size = std::max<uint64_t>(size, element->uncompressed_size);
  auto has_room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() || (queue_.size() < ElementBoundLocked() && bytes_ + size <= max_bytes_);
  };
  {
    // Most pushes find room: no cancel callback to register (an allocation per element).
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    if (has_room()) {
      bytes_ += size;
      ++pushed_elements_;
      pushed_bytes_ += mean_size;
      queue_.push_back(std::move(element));
      return true;
    }
  }
  CancelCallback wake(cancel, [this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  if (!closed_ && !has_room()) {
    // Full: wait until the readers took about half, so that a producer faster than its readers
    // wakes once per half buffer instead of once per element. Cancellation only ends the wait:
    // with room, the element goes in.
    auto can_go_on = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || IsCancelled(cancel) || ProducerMayResume(queue_.size(), bytes_, size, ElementBoundLocked(), max_bytes_);
    };
    mu_.Await(absl::Condition(&can_go_on));
  }
  if (closed_ || !has_room()) return false;
  bytes_ += size;
  ++pushed_elements_;
  pushed_bytes_ += mean_size;
  queue_.push_back(std::move(element));
  return true;
}

void ElementBuffer::Close(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  close_status_ = std::move(status);
}

void ElementBuffer::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  queue_.clear();
  bytes_ = 0;
  if (!closed_) {
    closed_ = true;
    close_status_ = std::move(status);
  }
}

absl::StatusOr<ElementBuffer::Batch> ElementBuffer::Pop(size_t max_elements, size_t max_bytes, CancelToken* cancel) {
  // A cancel callback (an allocation) only for a reader that has to wait; it is registered without
  // the lock (lock order: the token's mutex, then ours), then the state is looked at again.
  std::optional<CancelCallback> wake;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (wake.has_value() || !queue_.empty() || closed_ || IsCancelled(cancel)) {
        return PopLocked(max_elements, max_bytes, cancel);
      }
    }
    wake.emplace(cancel, [this] { absl::MutexLock lock(&mu_); });
  }
}

absl::StatusOr<ElementBuffer::Batch> ElementBuffer::PopLocked(size_t max_elements, size_t max_bytes,
                                                              CancelToken* cancel) {
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_ || IsCancelled(cancel); };
  mu_.Await(absl::Condition(&ready));
  // Cancellation only ends a wait: what is there is handed out.
  if (queue_.empty() && !closed_) return absl::CancelledError("read cancelled");
  max_elements = std::max<size_t>(1, max_elements);
  Batch batch;
  size_t batch_bytes = 0;
  while (!queue_.empty() && batch.elements.size() < max_elements) {
    size_t size = queue_.front()->size();
    if (!batch.elements.empty() && batch_bytes + size > max_bytes) break;
    batch_bytes += size;
    bytes_ -= size;
    batch.elements.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  if (batch.elements.empty()) {
    if (!close_status_.ok()) return close_status_;
    batch.end_of_sequence = true;
  }
  return batch;
}

size_t ElementBuffer::size() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

size_t ElementBuffer::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

bool ElementBuffer::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool ElementBuffer::drained() const {
  absl::MutexLock lock(&mu_);
  return closed_ && close_status_.ok() && queue_.empty();
}

}  // namespace sluice::worker
