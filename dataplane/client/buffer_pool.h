// Recycles the byte buffers received elements live in. An element's tensors view one buffer; when
// the last of them is dropped the buffer comes back here (if the pool has room), and a reader
// parses a later response into it. That saves an allocation of the element's size, and the page
// faults of fresh memory, per element.
//
// Buffers keep a weak reference to the pool: an element may outlive the client that read it.
// Threading: thread-safe.
#ifndef SLUICE_DATAPLANE_CLIENT_BUFFER_POOL_H_
#define SLUICE_DATAPLANE_CLIENT_BUFFER_POOL_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sluice::client {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_buffers` buffers of at most `max_bytes` capacity in all.
  static std::shared_ptr<BufferPool> Create(size_t max_buffers, size_t max_bytes);

  // An empty buffer, with the capacity of an earlier element when the pool has one.
  std::string Take();
  // `bytes`, shared; it returns to the pool when the last reference is dropped.
  std::shared_ptr<const std::string> Adopt(std::string bytes);

  size_t buffers() const;
  size_t bytes() const;

 private:
  BufferPool(size_t max_buffers, size_t max_bytes) : max_buffers_(max_buffers), max_bytes_(max_bytes) {}
  void Return(std::string buffer);

  const size_t max_buffers_;
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::string> free_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_BUFFER_POOL_H_
