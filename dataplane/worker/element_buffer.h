// Encoded elements and the bounded buffer between a task's producer and its readers.
//
// EncodedElement is an element as it goes on the wire: the element codec's bytes, compressed.
// ElementBuffer is a FIFO bounded by element count and bytes (one element is always admitted, so a
// single element larger than the byte bound still passes). All readers of a task pop from the same
// buffer, so each element goes to exactly one reader (job sharing).
//
// Threading: ElementBuffer is thread-safe; any number of producers and readers. Blocking calls take
// a CancelToken (may be null) that interrupts them.
#ifndef SLUICE_DATAPLANE_WORKER_ELEMENT_BUFFER_H_
#define SLUICE_DATAPLANE_WORKER_ELEMENT_BUFFER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/pipeline/tensor.h"
#include "dataplane/worker/cancel_token.h"
#include "dataservice.pb.h"

namespace sluice::worker {

struct EncodedElement {
  // User-provided: value-initialising (make_unique<EncodedElement[]>, a WireEncoder slab's block
  // of 64) would zero-fill every element before constructing it.
  EncodedElement() noexcept {}

  // EncodeElement bytes compressed with `codec`. Uncompressed, large tensor payloads are views of
  // the tensors' memory (no copy until the kernel's); compressed, one owned buffer. A range
  // without an owner (an element in a WireEncoder slab) lives as long as this element, and is
  // copied, never viewed, by WireBytes::Builder.
  pipeline::WireBytes bytes;
  pipeline::Codec codec = pipeline::Codec::kNone;
  uint64_t uncompressed_size = 0;
  // Set by WireEncoder (response_encoder.h): this element as one `elements` entry of a
  // GetElementsResponse (field key, length, ElementData), contiguous, living as long as the
  // element. The response encoder sends it as it is.
  absl::string_view framed;

  size_t size() const { return bytes.size(); }
};
// Shared because cross-job sharing hands one element to several jobs; the bytes are immutable.
using EncodedElementPtr = std::shared_ptr<const EncodedElement>;

// Encodes `element` and compresses it: COMPRESSION_AUTO picks with pipeline::ChooseCodec.
absl::StatusOr<EncodedElementPtr> EncodeForWire(const pipeline::Element& element, service::Compression compression);

// The codec a compression setting asks for; nullopt for AUTO (any codec will do).
absl::StatusOr<std::optional<pipeline::Codec>> CodecFor(service::Compression compression);
service::Compression ToCompression(pipeline::Codec codec);

// `element` in the codec `wanted` names: the same pointer when it already is (or `wanted` is
// nullopt), else a re-compressed copy.
absl::StatusOr<EncodedElementPtr> Recode(EncodedElementPtr element, std::optional<pipeline::Codec> wanted);

// Fills `out` from `element` (re-compressed as `wanted` asks), copying the bytes into the message.
absl::Status FillElementData(EncodedElementPtr element, std::optional<pipeline::Codec> wanted,
                             service::ElementData* out);

// Whether a producer that found the buffer full may go on: when the buffer is empty, or at most
// half full (by elements and bytes) with room for the incoming element.
bool ProducerMayResume(size_t queued, size_t queued_bytes, size_t incoming_bytes, size_t max_elements,
                       size_t max_bytes);

// A task's elements between its producer and its readers, bounded by elements and by bytes.
//
// `min_bytes` > 0 lets small elements past `max_elements`: once the elements pushed so far average
// fewer than min_bytes / max_elements bytes (uncompressed), the element bound is min_bytes / that
// mean (at most kMaxElementBound; `max_bytes` still bounds the encoded bytes). A buffer of 256 elements of 1 KiB holds a
// quarter of one 1 MiB response, so the producer and the sender would wake each other for every
// 128 elements; with 4 MiB they wake once per ~2,000. Threading: every method is thread-safe.
class ElementBuffer {
 public:
  static constexpr size_t kMaxElementBound = 1 << 16;

  ElementBuffer(size_t max_elements, size_t max_bytes, size_t min_bytes = 0);

  // Appends, waiting while the buffer is full; a producer that had to wait resumes once the
  // readers emptied about half of it. False when the buffer is closed, or when `cancel` fires
  // while waiting for room.
  bool Push(EncodedElementPtr element, CancelToken* cancel);
  // No more elements: OK = end of data (readers get end_of_sequence once the buffer is empty);
  // an error is returned to readers once the buffer is empty. The first Close wins.
  void Close(absl::Status status);
  // Closes at once, dropping what is buffered (task deletion).
  void Abort(absl::Status status);

  struct Batch {
    std::vector<EncodedElementPtr> elements;
    bool end_of_sequence = false;  // closed OK and nothing left
  };
  // Takes at least one element and then whatever else is buffered, up to `max_elements` and
  // `max_bytes` (the first element always counts). Waits until an element is available or the
  // buffer is closed and empty. CANCELLED when `cancel` fires; the close status when closed with an
  // error and empty.
  absl::StatusOr<Batch> Pop(size_t max_elements, size_t max_bytes, CancelToken* cancel);

  size_t size() const;
  size_t bytes() const;
  bool closed() const;
  // Closed OK and empty: every element was handed out.
  bool drained() const;
  // The element bound now (max_elements, or more for small elements: see above).
  size_t element_bound() const;

 private:
  size_t ElementBoundLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<Batch> PopLocked(size_t max_elements, size_t max_bytes, CancelToken* cancel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_elements_;
  const size_t max_bytes_;
  const size_t min_bytes_;
  mutable absl::Mutex mu_;
  uint64_t pushed_elements_ ABSL_GUARDED_BY(mu_) = 0;  // for their mean size (element_bound)
  uint64_t pushed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<EncodedElementPtr> queue_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_ELEMENT_BUFFER_H_
