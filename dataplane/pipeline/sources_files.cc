// File-based sources: `files` (one element per file, e.g. JPEGs) and `idx` (the MNIST /
// Fashion-MNIST format, optionally gzipped).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/file_util.h"
#include "dataplane/pipeline/source.h"

namespace sluice::pipeline {
namespace {

// ---------------------------------------------------------------- files

class FilesReader : public SplitReader {
 public:
  FilesReader(const std::vector<std::string>* files, const std::map<std::string, int64_t>* labels, const Split& split,
              std::string field, bool include_path, SourceContext ctx)
      : files_(files), labels_(labels), split_(split), field_(std::move(field)), include_path_(include_path), ctx_(ctx),
        i_(split.begin) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    int64_t end = split_.end < 0 ? static_cast<int64_t>(files_->size()) : split_.end;
    while (i_ < end) {
      const std::string& path = (*files_)[static_cast<size_t>(i_)];
      int64_t index = i_++;
      auto contents = MapFile(path);
      if (!contents.ok()) {
        if (ctx_.on_error == OnError::kSkip) {
          if (ctx_.stats) ctx_.stats->AddSkipped();
          continue;
        }
        return contents.status();
      }
      if (ctx_.max_element_bytes > 0 && static_cast<int64_t>(contents->size) > ctx_.max_element_bytes) {
        absl::Status s = absl::ResourceExhaustedError(absl::StrCat(path, ": file of ", contents->size,
                                                                   " bytes exceeds options.max_element_bytes (",
                                                                   ctx_.max_element_bytes, ")"));
        if (ctx_.on_error == OnError::kSkip) {
          if (ctx_.stats) ctx_.stats->AddSkipped();
          continue;
        }
        return s;
      }
      Element e;
      e.set_key(MixKey(split_.index, static_cast<uint64_t>(index)));
      absl::string_view bytes(reinterpret_cast<const char*>(contents->data), contents->size);
      e.Set(field_, Tensor::StringScalar(contents->owner, bytes));
      if (labels_ != nullptr) {
        std::string parent = std::filesystem::path(path).parent_path().filename().string();
        e.Set("label", Tensor::Scalar(labels_->at(parent)));
      }
      if (include_path_) e.Set("path", Tensor::StringScalar(path));
      return std::optional<Element>(std::move(e));
    }
    return std::optional<Element>();
  }

 private:
  const std::vector<std::string>* files_;
  const std::map<std::string, int64_t>* labels_;
  Split split_;
  std::string field_;
  bool include_path_;
  SourceContext ctx_;
  int64_t i_;
};

class FilesSource : public Source {
 public:
  FilesSource(std::vector<std::string> files, std::string field, bool labels_from_dirs, bool include_path, int64_t split_size)
      : files_(std::move(files)), field_(std::move(field)), include_path_(include_path), split_size_(split_size) {
    if (labels_from_dirs) {
      std::map<std::string, int64_t> dirs;
      for (const auto& f : files_) dirs[std::filesystem::path(f).parent_path().filename().string()] = 0;
      int64_t next = 0;
      for (auto& [name, label] : dirs) label = next++;
      labels_ = std::move(dirs);
    }
  }
  absl::StatusOr<std::vector<Split>> ListSplits() const override {
    std::vector<Split> splits;
    uint64_t index = 0;
    int64_t n = static_cast<int64_t>(files_.size());
    for (int64_t b = 0; b < n; b += split_size_) splits.push_back(Split{index++, "files", b, std::min(n, b + split_size_)});
    return splits;
  }
  absl::StatusOr<uint64_t> NumSplits() const override {
    const uint64_t n = files_.size();
    return n / static_cast<uint64_t>(split_size_) + (n % static_cast<uint64_t>(split_size_) != 0 ? 1 : 0);
  }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext& ctx) const override {
    if (split.begin < 0 || split.begin > static_cast<int64_t>(files_.size()) || split.end > static_cast<int64_t>(files_.size())) {
      return absl::OutOfRangeError(absl::StrCat("files: split ", split.DebugString(), " is outside the ", files_.size(), " files"));
    }
    return std::unique_ptr<SplitReader>(
        new FilesReader(&files_, labels_ ? &*labels_ : nullptr, split, field_, include_path_, ctx));
  }

 private:
  std::vector<std::string> files_;
  std::string field_;
  bool include_path_;
  int64_t split_size_;
  std::optional<std::map<std::string, int64_t>> labels_;
};

// ---------------------------------------------------------------- idx

struct IdxFile {
  Buffer data;          // the whole (inflated) file
  DType dtype;
  Shape item_shape;     // dimensions after the first
  int64_t count = 0;
  size_t header_bytes = 0;
  size_t item_bytes = 0;
};

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

absl::StatusOr<IdxFile> ParseIdx(const std::string& path) {
  auto buffer = ReadMaybeCompressedFile(path);
  if (!buffer.ok()) return buffer.status();
  IdxFile f;
  f.data = *std::move(buffer);
  const uint8_t* p = f.data.data;
  if (f.data.size < 4 || p[0] != 0 || p[1] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte offset 0: not an IDX file (magic must start with two zero bytes)"));
  }
  switch (p[2]) {
    case 0x08: f.dtype = DType::kUInt8; break;
    case 0x09: f.dtype = DType::kInt8; break;
    case 0x0B: f.dtype = DType::kInt16; break;
    case 0x0C: f.dtype = DType::kInt32; break;
    case 0x0D: f.dtype = DType::kFloat32; break;
    case 0x0E: f.dtype = DType::kFloat64; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(path, ": byte offset 2: unknown IDX type code 0x", absl::Hex(p[2])));
  }
  int dims = p[3];
  if (dims < 1) return absl::InvalidArgumentError(absl::StrCat(path, ": byte offset 3: IDX file with no dimensions"));
  f.header_bytes = 4 + 4 * static_cast<size_t>(dims);
  if (f.data.size < f.header_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated IDX header (", f.data.size, " bytes)"));
  }
  f.count = ReadBigEndian32(p + 4);
  for (int d = 1; d < dims; ++d) f.item_shape.push_back(ReadBigEndian32(p + 4 + 4 * d));
  f.item_bytes = static_cast<size_t>(NumElements(f.item_shape)) * DTypeSize(f.dtype);
  size_t want = f.header_bytes + f.item_bytes * static_cast<size_t>(f.count);
  if (f.data.size < want) {
    return absl::DataLossError(absl::StrCat(path, ": IDX file is truncated: header promises ", f.count, " items (",
                                            want, " bytes) but the file has ", f.data.size, " bytes"));
  }
  return f;
}

// IDX stores multi-byte values big-endian; tensors are little-endian (host order).
Tensor IdxItem(const IdxFile& f, int64_t i) {
  const uint8_t* src = f.data.data + f.header_bytes + f.item_bytes * static_cast<size_t>(i);
  size_t width = DTypeSize(f.dtype);
  if (width == 1) {
    Buffer b{f.data.owner, src, f.item_bytes};
    return *Tensor::FromBuffer(f.dtype, f.item_shape, b);
  }
  Tensor t = Tensor::Allocate(f.dtype, f.item_shape);
  uint8_t* dst = t.mutable_raw();
  for (size_t k = 0; k < f.item_bytes; k += width) {
    for (size_t b = 0; b < width; ++b) dst[k + b] = src[k + width - 1 - b];
  }
  return t;
}

class IdxSource;

class IdxReader : public SplitReader {
 public:
  IdxReader(std::shared_ptr<const IdxFile> images, std::shared_ptr<const IdxFile> labels, const Split& split,
            std::string image_field, std::string label_field)
      : images_(std::move(images)), labels_(std::move(labels)), split_(split), image_field_(std::move(image_field)),
        label_field_(std::move(label_field)), i_(split.begin) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    if (i_ >= split_.end) return std::optional<Element>();
    Element e;
    e.set_key(MixKey(split_.index, static_cast<uint64_t>(i_)));
    e.Set(image_field_, IdxItem(*images_, i_));
    if (labels_) {
      Tensor label = IdxItem(*labels_, i_);
      if (label.rank() == 0) {
        e.Set(label_field_, Tensor::Scalar(static_cast<int64_t>(label.GetAsDouble(0))));
      } else {
        e.Set(label_field_, std::move(label));
      }
    }
    ++i_;
    return std::optional<Element>(std::move(e));
  }

 private:
  std::shared_ptr<const IdxFile> images_, labels_;
  Split split_;
  std::string image_field_, label_field_;
  int64_t i_;
};

class IdxSource : public Source {
 public:
  IdxSource(std::shared_ptr<const IdxFile> images, std::shared_ptr<const IdxFile> labels, std::string images_path,
            std::string image_field, std::string label_field, int64_t split_size)
      : images_(std::move(images)), labels_(std::move(labels)), images_path_(std::move(images_path)),
        image_field_(std::move(image_field)), label_field_(std::move(label_field)), split_size_(split_size) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override {
    std::vector<Split> splits;
    uint64_t index = 0;
    for (int64_t b = 0; b < images_->count; b += split_size_) {
      splits.push_back(Split{index++, images_path_, b, std::min(images_->count, b + split_size_)});
    }
    return splits;
  }
  absl::StatusOr<uint64_t> NumSplits() const override {
    if (images_->count <= 0) return uint64_t{0};
    return static_cast<uint64_t>(images_->count / split_size_ + (images_->count % split_size_ != 0 ? 1 : 0));
  }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext&) const override {
    if (split.begin < 0 || split.end > images_->count || split.begin > split.end) {
      return absl::OutOfRangeError(absl::StrCat("idx: split ", split.DebugString(), " is outside [0, ", images_->count, ")"));
    }
    return std::unique_ptr<SplitReader>(new IdxReader(images_, labels_, split, image_field_, label_field_));
  }

 private:
  std::shared_ptr<const IdxFile> images_, labels_;
  std::string images_path_, image_field_, label_field_;
  int64_t split_size_;
};

}  // namespace

void RegisterFileSources(SourceRegistry& registry) {
  (void)registry.Register(SourceDescriptor{
      "files",
      "One element per file: its bytes as a string field (e.g. a JPEG to decode), optionally a label from its directory.",
      {Required("files", ArgType::kStringOrList, "a glob, comma-separated globs, or a list of globs"),
       WithDefault("field", "image", "name of the bytes field"),
       WithDefault("label_from_dir", false, "add an int64 `label`: the index of the file's parent directory name in sorted order"),
       WithDefault("include_path", false, "add a string `path` field"),
       Bounded(WithDefault("split_size", int64_t{64}, "files per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        auto files = ExpandGlobs(a.StringOrList("files"));
        if (!files.ok()) return files.status();
        return std::unique_ptr<Source>(new FilesSource(*std::move(files), a.String("field"), a.Bool("label_from_dir"),
                                                       a.Bool("include_path"), a.Int("split_size")));
      }});
  (void)registry.Register(SourceDescriptor{
      "idx",
      "IDX files (MNIST, Fashion-MNIST), plain or .gz: items as tensors, labels as int64.",
      {Required("images", ArgType::kString, "path of the items file (e.g. train-images-idx3-ubyte.gz)"),
       Optional("labels", ArgType::kString, "path of the labels file; must hold as many items"),
       WithDefault("image_field", "image", "name of the item field"),
       WithDefault("label_field", "label", "name of the label field"),
       Bounded(WithDefault("split_size", int64_t{1024}, "items per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        auto images = ParseIdx(a.String("images"));
        if (!images.ok()) return images.status();
        std::shared_ptr<const IdxFile> labels;
        if (a.Has("labels")) {
          auto l = ParseIdx(a.String("labels"));
          if (!l.ok()) return l.status();
          if (l->count != images->count) {
            return absl::InvalidArgumentError(absl::StrCat("labels: ", a.String("labels"), " holds ", l->count,
                                                           " items but images holds ", images->count));
          }
          labels = std::make_shared<const IdxFile>(*std::move(l));
        }
        return std::unique_ptr<Source>(new IdxSource(std::make_shared<const IdxFile>(*std::move(images)), labels,
                                                     a.String("images"), a.String("image_field"),
                                                     a.String("label_field"), a.Int("split_size")));
      }});
}

}  // namespace sluice::pipeline
