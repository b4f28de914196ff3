// The `tfrecord` source: one split per file, one element per record with a scalar string field
// `record` viewing the file's memory (see docs/pipeline-tfrecord.md).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"

namespace sluice::pipeline {
namespace {

constexpr absl::string_view kRecordField = "record";

// Reads one split, skipping bad records when the context says so. Used by one thread at a time.
class TFRecordSplitReader : public SplitReader {
 public:
  TFRecordSplitReader(std::unique_ptr<TFRecordReader> reader, uint64_t split_index,
                      SourceContext context)
      : reader_(std::move(reader)), split_index_(split_index), context_(context) {}

  absl::StatusOr<std::optional<Element>> Next() override {
    while (true) {
      auto record = reader_->Next();
      if (!record.ok()) {
        if (context_.on_error != OnError::kSkip) return record.status();
        // The reader is past the bad record, or at the end when the framing is lost.
        if (context_.stats != nullptr) context_.stats->AddSkipped();
        continue;
      }
      if (!record->has_value()) return std::nullopt;
      Element element;
      element.Set(std::string(kRecordField),
                  Tensor::StringScalar(std::move((*record)->owner), (*record)->data));
      element.set_key(MixKey(split_index_, (*record)->index));
      return element;
    }
  }

 private:
  std::unique_ptr<TFRecordReader> reader_;
  const uint64_t split_index_;
  const SourceContext context_;
};

class TFRecordSource : public Source {
 public:
  TFRecordSource(std::vector<std::string> patterns, std::string compression, bool verify_crc)
      : patterns_(std::move(patterns)), compression_(std::move(compression)),
        verify_crc_(verify_crc) {}

  absl::StatusOr<std::vector<Split>> ListSplits() const override {
    std::vector<Split> splits;
    for (const std::string& pattern : patterns_) {
      auto files = ExpandGlob(pattern);
      if (!files.ok()) {
        return absl::Status(files.status().code(),
                            absl::StrCat("tfrecord source: files: ", files.status().message()));
      }
      if (files->empty()) {
        return absl::NotFoundError(
            absl::StrCat("tfrecord source: files: no file matches '", pattern, "'"));
      }
      for (std::string& path : *files) {
        Split split;
        split.index = splits.size();
        split.path = std::move(path);
        splits.push_back(std::move(split));
      }
    }
    return splits;
  }

  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split,
                                                    const SourceContext& context) const override {
    auto compression = ResolveTFRecordCompression(compression_, split.path);
    if (!compression.ok()) return compression.status();
    TFRecordReaderOptions options;
    options.verify_crc = verify_crc_;
    options.max_record_bytes =
        context.max_element_bytes > 0 ? static_cast<uint64_t>(context.max_element_bytes) : 0;
    auto reader = OpenTFRecordFile(split.path, *compression, options, split.begin, split.end);
    if (!reader.ok()) return reader.status();
    return std::unique_ptr<SplitReader>(
        std::make_unique<TFRecordSplitReader>(*std::move(reader), split.index, context));
  }

 private:
  const std::vector<std::string> patterns_;
  const std::string compression_;
  const bool verify_crc_;
};

// `files` is a string (a glob, or comma-separated globs) or a list of globs.
absl::StatusOr<std::vector<std::string>> FilePatterns(const Args& args) {
  const Value* files = args.Raw("files");
  std::vector<std::string> patterns;
  if (files != nullptr && files->kind_case() == Value::kStringValue) {
    patterns.push_back(files->string_value());
  } else if (files != nullptr && files->kind_case() == Value::kListValue) {
    for (const Value& item : files->list_value().values()) {
      if (item.kind_case() != Value::kStringValue) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tfrecord source: files: list items must be paths or globs, got ", ValueToString(item)));
      }
      patterns.push_back(item.string_value());
    }
  }
  if (patterns.empty() || (patterns.size() == 1 && patterns[0].empty())) {
    return absl::InvalidArgumentError(
        "tfrecord source: files: give a path, a glob such as /data/train-*.tfrecord, or a list");
  }
  return patterns;
}

}  // namespace

void RegisterTFRecordSource(SourceRegistry& registry) {
  SourceDescriptor descriptor;
  descriptor.name = "tfrecord";
  descriptor.summary =
      "TFRecord files (optionally gzip/zlib-compressed); one element per record with a scalar "
      "string field 'record'. One split per file.";
  descriptor.args = {
      Required("files", ArgType::kStringOrList,
               "path or glob of the files; several paths or globs separated by commas"),
      Choice("compression", {"auto", "none", "gzip", "zlib"}, "auto",
             "compression of the files; auto picks by extension (.gz gzip, .zz/.zlib zlib)"),
      WithDefault("verify_crc", true, "check the CRC-32C of every record's length and data"),
  };
  // SourceRegistry::Register appends CommonSourceArgs() (on_error); the executor passes it to
  // Open() as SourceContext::on_error.
  descriptor.factory = [](const Args& args) -> absl::StatusOr<std::unique_ptr<Source>> {
    auto patterns = FilePatterns(args);
    if (!patterns.ok()) return patterns.status();
    auto compression = args.String("compression", "auto");
    if (auto check = ResolveTFRecordCompression(compression, ""); !check.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tfrecord source: ", check.status().message()));
    }
    return std::unique_ptr<Source>(std::make_unique<TFRecordSource>(
        *std::move(patterns), std::move(compression), args.Bool("verify_crc", true)));
  };
  (void)registry.Register(std::move(descriptor));
}

}  // namespace sluice::pipeline
