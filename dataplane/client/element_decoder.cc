#include "dataplane/client/element_decoder.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/element_codec.h"

namespace sluice::client {

absl::StatusOr<DecodedElement> DecodeElementData(service::ElementData& data, uint64_t max_element_bytes,
                                                 BufferPool* pool) {
  const uint64_t size = data.uncompressed_size();
  if (size > max_element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("element declares uncompressed_size ", size,
                                                   " bytes, above the client's max_element_bytes ", max_element_bytes,
                                                   " (corrupt worker response, or raise max_element_bytes)"));
  }
  pipeline::Codec codec;
  switch (data.compression()) {
    case service::COMPRESSION_NONE: codec = pipeline::Codec::kNone; break;
    case service::COMPRESSION_LZ4: codec = pipeline::Codec::kLz4; break;
    case service::COMPRESSION_ZSTD: codec = pipeline::Codec::kZstd; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("element has compression ", static_cast<int>(data.compression()),
                                                     ", which is not a concrete codec (NONE, LZ4 or ZSTD)"));
  }
  auto share = [pool](std::string b) -> std::shared_ptr<const std::string> {
    if (pool != nullptr) return pool->Adopt(std::move(b));
    return std::make_shared<const std::string>(std::move(b));
  };
  std::shared_ptr<const std::string> bytes;
  if (codec == pipeline::Codec::kNone) {
    if (data.data().size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("uncompressed element is ", data.data().size(),
                                                     " bytes but declares uncompressed_size ", size));
    }
    bytes = share(std::move(*data.mutable_data()));
    if (pool != nullptr) {
      *data.mutable_data() = pool->Take();
    } else {
      data.clear_data();
    }
  } else {
    auto out = pipeline::Decompress(data.data(), codec, size);
    if (!out.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot decompress element (", data.data().size(),
                                                     " compressed bytes, uncompressed_size ", size,
                                                     "): ", out.status().message()));
    }
    bytes = share(*std::move(out));
    data.clear_data();
  }
  auto element = pipeline::DecodeElement(bytes);
  if (!element.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot decode element: ", element.status().message()));
  return DecodedElement{*std::move(element), size};
}

}  // namespace sluice::client
