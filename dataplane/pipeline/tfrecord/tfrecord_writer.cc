#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/tfrecord/crc32c.h"

namespace sluice::pipeline {
namespace {

constexpr size_t kWriteBlockBytes = 1 << 20;

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

}  // namespace

void AppendTFRecord(absl::string_view data, std::string* out) {
  const size_t start = out->size();
  AppendLittleEndian(data.size(), 8, out);
  AppendLittleEndian(MaskedCrc32c(out->data() + start, 8), 4, out);
  out->append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data.data(), data.size()), 4, out);
}

std::string EncodeTFRecords(absl::Span<const std::string> records) {
  std::string out;
  size_t total = 0;
  for (const auto& record : records) total += record.size() + kTFRecordOverheadBytes;
  out.reserve(total);
  for (const auto& record : records) AppendTFRecord(record, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(
    const std::string& path, TFRecordCompression compression) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    const int error = errno;
    std::string message = absl::StrCat(path, ": cannot create: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(file, path, compression));
}

TFRecordWriter::TFRecordWriter(std::FILE* file, std::string path, TFRecordCompression compression)
    : file_(file), path_(std::move(path)) {
  if (compression != TFRecordCompression::kNone) {
    deflate_ = std::make_unique<DeflateBuffer>(
        compression == TFRecordCompression::kGzip ? ZlibFormat::kGzip : ZlibFormat::kZlib,
        &compressed_);
  }
}

TFRecordWriter::~TFRecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TFRecordWriter::Drain(bool force) {
  if (framed_.size() < kWriteBlockBytes && !force) return absl::OkStatus();
  std::string* pending = &framed_;
  if (deflate_ != nullptr) {
    if (auto status = deflate_->Append(framed_); !status.ok()) return status;
    framed_.clear();
    if (force) {
      if (auto status = deflate_->Finish(); !status.ok()) return status;
    }
    pending = &compressed_;
  }
  if (!pending->empty() && std::fwrite(pending->data(), 1, pending->size(), file_) != pending->size()) {
    return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  pending->clear();
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (!error_.ok()) return error_;
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer closed"));
  AppendTFRecord(record, &framed_);
  error_ = Drain(/*force=*/false);
  return error_;
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return error_;
  if (error_.ok()) error_ = Drain(/*force=*/true);
  if (std::fclose(file_) != 0 && error_.ok()) {
    error_ = absl::DataLossError(absl::StrCat(path_, ": close failed: ", std::strerror(errno)));
  }
  file_ = nullptr;
  return error_;
}

absl::Status WriteTFRecordFile(const std::string& path, absl::Span<const std::string> records,
                               TFRecordCompression compression) {
  auto writer = TFRecordWriter::Open(path, compression);
  if (!writer.ok()) return writer.status();
  for (const auto& record : records) {
    if (auto status = (*writer)->Write(record); !status.ok()) return status;
  }
  return (*writer)->Close();
}

}  // namespace sluice::pipeline
