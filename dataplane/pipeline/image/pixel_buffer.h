// Output storage for image ops: an uninitialised, 64-byte aligned allocation that is written once
// and then handed to a Tensor without a copy. Tensor::Allocate zero-fills, which costs a full
// extra pass over every output image; ops that overwrite every byte use this instead.
// Single-owner until Finish(); the resulting Tensor is immutable like any other.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_PIXEL_BUFFER_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_PIXEL_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline::image {

class PixelBuffer {
 public:
  PixelBuffer(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
    size_ = static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype_);
    const size_t rounded = (size_ + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw std::bad_alloc();
    owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

  uint8_t* data() { return static_cast<uint8_t*>(owner_.get()); }
  template <typename T>
  T* as() {
    return static_cast<T*>(owner_.get());
  }
  size_t size() const { return size_; }
  void Zero() { std::memset(owner_.get(), 0, size_); }

  // The tensor viewing these bytes; the buffer must not be written afterwards.
  Tensor Finish() && {
    Buffer b{std::move(owner_), nullptr, size_};
    b.data = static_cast<const uint8_t*>(b.owner.get());
    return *Tensor::FromBuffer(dtype_, std::move(shape_), std::move(b));
  }

 private:
  DType dtype_;
  Shape shape_;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
};

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_PIXEL_BUFFER_H_
