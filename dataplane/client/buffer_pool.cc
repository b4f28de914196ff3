#include "dataplane/client/buffer_pool.h"

#include <utility>

namespace sluice::client {

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_buffers, size_t max_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_buffers, max_bytes));
}

std::string BufferPool::Take() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return std::string();
  std::string out = std::move(free_.back());
  free_.pop_back();
  free_bytes_ -= out.capacity();
  return out;
}

std::shared_ptr<const std::string> BufferPool::Adopt(std::string bytes) {
  std::weak_ptr<BufferPool> pool = weak_from_this();
  return std::shared_ptr<const std::string>(new std::string(std::move(bytes)), [pool](const std::string* s) {
    std::string* owned = const_cast<std::string*>(s);
    if (auto p = pool.lock()) p->Return(std::move(*owned));
    delete owned;
  });
}

void BufferPool::Return(std::string buffer) {
  buffer.clear();  // keeps the capacity
  const size_t capacity = buffer.capacity();
  absl::MutexLock lock(&mu_);
  if (free_.size() >= max_buffers_ || free_bytes_ + capacity > max_bytes_) return;  // freed by the caller
  free_bytes_ += capacity;
  free_.push_back(std::move(buffer));
}

size_t BufferPool::buffers() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

size_t BufferPool::bytes() const {
  absl::MutexLock lock(&mu_);
  return free_bytes_;
}

}  // namespace sluice::client
