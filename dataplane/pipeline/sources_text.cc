// Line-oriented sources: `jsonl` (one JSON object per line) and `csv`. Both split files into byte
// ranges; a range owns the lines that start inside it, so splits can be read independently.
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/file_util.h"
#include "dataplane/pipeline/source.h"

namespace sluice::pipeline {
namespace {

absl::StatusOr<std::vector<Split>> ByteRangeSplits(const std::vector<std::string>& files, int64_t split_bytes) {
  std::vector<Split> splits;
  uint64_t index = 0;
  for (const auto& f : files) {
    auto size = FileSize(f);
    if (!size.ok()) return size.status();
    if (*size == 0) continue;
    for (int64_t begin = 0; begin < *size; begin += split_bytes) {
      splits.push_back(Split{index++, f, begin, std::min(*size, begin + split_bytes)});
    }
  }
  return splits;
}

// How many splits ByteRangeSplits would return, from the file sizes alone.
absl::StatusOr<uint64_t> NumByteRangeSplits(const std::vector<std::string>& files, int64_t split_bytes) {
  uint64_t n = 0;
  for (const auto& f : files) {
    auto size = FileSize(f);
    if (!size.ok()) return size.status();
    if (*size > 0) n += static_cast<uint64_t>(*size / split_bytes + (*size % split_bytes != 0 ? 1 : 0));
  }
  return n;
}

// Iterates over the lines starting in [split.begin, split.end) of a mapped file.
class LineCursor {
 public:
  LineCursor(Buffer file, const Split& split) : file_(std::move(file)) {
    const char* data = reinterpret_cast<const char*>(file_.data);
    size_t size = file_.size;
    end_ = split.end < 0 ? size : std::min(size, static_cast<size_t>(split.end));
    pos_ = static_cast<size_t>(std::max<int64_t>(0, split.begin));
    if (pos_ > 0 && pos_ <= size && data[pos_ - 1] != '\n') {
      // The line containing `begin` belongs to the previous split.
      const void* nl = std::memchr(data + pos_, '\n', size - pos_);
      pos_ = nl ? static_cast<size_t>(static_cast<const char*>(nl) - data) + 1 : size;
    }
  }
  // The next line (without its newline) and its starting byte offset; false at the end.
  bool NextLine(absl::string_view* line, size_t* offset) {
    const char* data = reinterpret_cast<const char*>(file_.data);
    if (pos_ >= end_ || pos_ >= file_.size) return false;
    const void* nl = std::memchr(data + pos_, '\n', file_.size - pos_);
    size_t stop = nl ? static_cast<size_t>(static_cast<const char*>(nl) - data) : file_.size;
    *offset = pos_;
    *line = absl::string_view(data + pos_, stop - pos_);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos_ = stop + 1;
    return true;
  }
  const Buffer& file() const { return file_; }

 private:
  Buffer file_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

// Reads one element per non-blank line of a split: parse errors name the file and the line's
// byte offset, and are skipped and counted under on_error: skip. Subclasses parse a line.
class LineElementReader : public SplitReader {
 public:
  LineElementReader(Buffer file, const Split& split, SourceContext ctx, bool skip_first_line)
      : cursor_(std::move(file), split), split_(split), ctx_(ctx), skip_first_line_(skip_first_line) {}
  absl::StatusOr<std::optional<Element>> Next() final {
    absl::string_view line;
    size_t offset;
    while (cursor_.NextLine(&line, &offset)) {
      if (skip_first_line_) {
        skip_first_line_ = false;
        continue;
      }
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      auto element = ParseLine(line);
      if (!element.ok()) {
        absl::Status s(element.status().code(),
                       absl::StrCat(split_.path, ": line at byte offset ", offset, ": ", element.status().message()));
        if (ctx_.on_error == OnError::kSkip) {
          if (ctx_.stats) ctx_.stats->AddSkipped();
          continue;
        }
        return s;
      }
      element->set_key(MixKey(split_.index, offset));
      return std::optional<Element>(*std::move(element));
    }
    return std::optional<Element>();
  }

 protected:
  virtual absl::StatusOr<Element> ParseLine(absl::string_view line) = 0;

 private:
  LineCursor cursor_;
  Split split_;
  SourceContext ctx_;
  bool skip_first_line_;
};

// ---------------------------------------------------------------- jsonl

absl::StatusOr<Tensor> JsonToTensor(const nlohmann::json& v, const std::string& name) {
  using json = nlohmann::json;
  if (v.is_boolean()) {
    Tensor t = Tensor::Allocate(DType::kBool, {});
    t.mutable_raw()[0] = v.get<bool>() ? 1 : 0;
    return t;
  }
  if (v.is_number_integer()) return Tensor::Scalar(v.get<int64_t>());
  if (v.is_number()) return Tensor::ScalarFloat(v.get<float>());
  if (v.is_string()) return Tensor::StringScalar(v.get<std::string>());
  if (v.is_array()) {
    // Rectangular nested arrays of numbers, or flat arrays of strings.
    Shape shape;
    const json* cur = &v;
    while (cur->is_array()) {
      shape.push_back(static_cast<int64_t>(cur->size()));
      if (cur->empty()) break;
      cur = &(*cur)[0];
    }
    std::vector<const json*> leaves;
    std::function<absl::Status(const json&, size_t)> walk = [&](const json& node, size_t depth) -> absl::Status {
      if (depth == shape.size()) {
        if (node.is_array() || node.is_object() || node.is_null()) {
          return absl::InvalidArgumentError(absl::StrCat("field '", name, "': nested arrays must be rectangular"));
        }
        leaves.push_back(&node);
        return absl::OkStatus();
      }
      if (!node.is_array() || static_cast<int64_t>(node.size()) != shape[depth]) {
        return absl::InvalidArgumentError(absl::StrCat("field '", name, "': nested arrays must be rectangular"));
      }
      for (const auto& child : node) {
        if (auto s = walk(child, depth + 1); !s.ok()) return s;
      }
      return absl::OkStatus();
    };
    if (auto s = walk(v, 0); !s.ok()) return s;
    bool all_int = true, all_num = true, all_str = true;
    for (const json* leaf : leaves) {
      all_int &= leaf->is_number_integer();
      all_num &= leaf->is_number();
      all_str &= leaf->is_string();
    }
    if (leaves.empty() || all_int) {
      Tensor t = Tensor::Allocate(DType::kInt64, shape);
      for (size_t i = 0; i < leaves.size(); ++i) t.mutable_data<int64_t>()[i] = leaves[i]->get<int64_t>();
      return t;
    }
    if (all_num) {
      Tensor t = Tensor::Allocate(DType::kFloat32, shape);
      for (size_t i = 0; i < leaves.size(); ++i) t.mutable_data<float>()[i] = leaves[i]->get<float>();
      return t;
    }
    if (all_str) {
      std::vector<std::string> values;
      for (const json* leaf : leaves) values.push_back(leaf->get<std::string>());
      return Tensor::StringsCopy(values, shape);
    }
    return absl::InvalidArgumentError(absl::StrCat("field '", name, "': arrays must hold only numbers or only strings"));
  }
  return absl::InvalidArgumentError(absl::StrCat("field '", name, "': unsupported JSON value (", v.type_name(),
                                                 "); use numbers, strings, booleans or arrays of them"));
}

class JsonlReader : public LineElementReader {
 public:
  JsonlReader(Buffer file, const Split& split, std::vector<std::string> fields, SourceContext ctx)
      : LineElementReader(std::move(file), split, ctx, /*skip_first_line=*/false), fields_(std::move(fields)) {}

 protected:
  absl::StatusOr<Element> ParseLine(absl::string_view line) override {
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError("malformed JSON");
    if (!j.is_object()) return absl::InvalidArgumentError("expected a JSON object per line");
    Element e;
    try {
      if (fields_.empty()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
          auto t = JsonToTensor(it.value(), it.key());
          if (!t.ok()) return t.status();
          e.Set(it.key(), *std::move(t));
        }
      } else {
        for (const auto& f : fields_) {
          auto it = j.find(f);
          if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat("missing field '", f, "'"));
          auto t = JsonToTensor(*it, f);
          if (!t.ok()) return t.status();
          e.Set(f, *std::move(t));
        }
      }
    } catch (const nlohmann::json::exception& ex) {
      return absl::InvalidArgumentError(absl::StrCat("bad JSON value: ", ex.what()));
    }
    return e;
  }

 private:
  std::vector<std::string> fields_;
};

class JsonlSource : public Source {
 public:
  JsonlSource(std::vector<std::string> files, std::vector<std::string> fields, int64_t split_bytes)
      : files_(std::move(files)), fields_(std::move(fields)), split_bytes_(split_bytes) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override { return ByteRangeSplits(files_, split_bytes_); }
  absl::StatusOr<uint64_t> NumSplits() const override { return NumByteRangeSplits(files_, split_bytes_); }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext& ctx) const override {
    auto file = MapFile(split.path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<SplitReader>(new JsonlReader(*std::move(file), split, fields_, ctx));
  }

 private:
  std::vector<std::string> files_;
  std::vector<std::string> fields_;
  int64_t split_bytes_;
};

// ---------------------------------------------------------------- csv

// Splits one CSV line into fields (RFC 4180 quoting within a line; quoted newlines unsupported).
absl::StatusOr<std::vector<std::string>> SplitCsvLine(absl::string_view line, char delimiter) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur.push_back('"');
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur.push_back(c);
      }
    } else if (c == '"' && cur.empty()) {
      quoted = true;
    } else if (c == delimiter) {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (quoted) return absl::InvalidArgumentError("unterminated quoted field");
  out.push_back(std::move(cur));
  return out;
}

struct CsvColumn {
  std::string name;
  DType dtype;
};

absl::StatusOr<Tensor> ParseCsvValue(absl::string_view text, const CsvColumn& col) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  switch (col.dtype) {
    case DType::kInt64: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || p != s.data() + s.size()) {
        return absl::InvalidArgumentError(absl::StrCat("column '", col.name, "': '", s, "' is not an integer"));
      }
      return Tensor::Scalar(v);
    }
    case DType::kFloat32: {
      std::string tmp(s);
      char* end = nullptr;
      float v = std::strtof(tmp.c_str(), &end);
      if (tmp.empty() || end != tmp.c_str() + tmp.size()) {
        return absl::InvalidArgumentError(absl::StrCat("column '", col.name, "': '", s, "' is not a number"));
      }
      return Tensor::ScalarFloat(v);
    }
    default:
      return Tensor::StringScalar(std::string(text));
  }
}

class CsvReader : public LineElementReader {
 public:
  CsvReader(Buffer file, const Split& split, const std::vector<CsvColumn>* columns, bool header, char delimiter,
            SourceContext ctx)
      : LineElementReader(std::move(file), split, ctx, /*skip_first_line=*/header && split.begin == 0),
        columns_(columns), delimiter_(delimiter) {}

 protected:
  absl::StatusOr<Element> ParseLine(absl::string_view line) override {
    auto fields = SplitCsvLine(line, delimiter_);
    if (!fields.ok()) return fields.status();
    if (fields->size() != columns_->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", columns_->size(), " columns, found ", fields->size()));
    }
    Element e;
    for (size_t i = 0; i < fields->size(); ++i) {
      auto t = ParseCsvValue((*fields)[i], (*columns_)[i]);
      if (!t.ok()) return t.status();
      e.Set((*columns_)[i].name, *std::move(t));
    }
    return e;
  }

 private:
  const std::vector<CsvColumn>* columns_;
  char delimiter_;
};

class CsvSource : public Source {
 public:
  CsvSource(std::vector<std::string> files, std::vector<CsvColumn> columns, bool header, char delimiter, int64_t split_bytes)
      : files_(std::move(files)), columns_(std::move(columns)), header_(header), delimiter_(delimiter),
        split_bytes_(split_bytes) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override { return ByteRangeSplits(files_, split_bytes_); }
  absl::StatusOr<uint64_t> NumSplits() const override { return NumByteRangeSplits(files_, split_bytes_); }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext& ctx) const override {
    auto file = MapFile(split.path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<SplitReader>(new CsvReader(*std::move(file), split, &columns_, header_, delimiter_, ctx));
  }

 private:
  std::vector<std::string> files_;
  std::vector<CsvColumn> columns_;
  bool header_;
  char delimiter_;
  int64_t split_bytes_;
};

// Reads the header (when present) and the first data row of the first file to settle column
// names and types: explicit `types` win; otherwise int64 if the value parses as one, float32 if it
// parses as a number, else string.
absl::StatusOr<std::vector<CsvColumn>> InferCsvColumns(const std::string& file, bool header, char delimiter,
                                                       std::vector<std::string> names,
                                                       const std::vector<std::pair<std::string, std::string>>& types) {
  auto mapped = MapFile(file);
  if (!mapped.ok()) return mapped.status();
  LineCursor cursor(*mapped, Split{0, file, 0, -1});
  absl::string_view line;
  size_t offset;
  std::vector<std::string> first_row;
  if (header) {
    if (!cursor.NextLine(&line, &offset)) return absl::InvalidArgumentError(absl::StrCat(file, ": empty CSV file; expected a header line"));
    auto h = SplitCsvLine(line, delimiter);
    if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": header: ", h.status().message()));
    if (names.empty()) {
      for (auto& n : *h) names.push_back(std::string(absl::StripAsciiWhitespace(n)));
    } else if (names.size() != h->size()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": `columns` names ", names.size(), " columns but the header has ", h->size()));
    }
  }
  while (cursor.NextLine(&line, &offset)) {
    if (line.empty()) continue;
    auto row = SplitCsvLine(line, delimiter);
    if (row.ok()) first_row = *row;
    break;
  }
  if (names.empty()) {
    if (first_row.empty()) return absl::InvalidArgumentError(absl::StrCat(file, ": no header and no `columns`; cannot name the columns"));
    for (size_t i = 0; i < first_row.size(); ++i) names.push_back(absl::StrCat("c", i));
  }
  std::vector<CsvColumn> cols;
  for (size_t i = 0; i < names.size(); ++i) {
    CsvColumn c{names[i], DType::kString};
    auto explicit_type = std::find_if(types.begin(), types.end(), [&](const auto& t) { return t.first == names[i]; });
    if (explicit_type != types.end()) {
      auto d = ParseDType(explicit_type->second);
      if (!d.ok() || (*d != DType::kInt64 && *d != DType::kFloat32 && *d != DType::kString)) {
        return absl::InvalidArgumentError(absl::StrCat("types.", names[i], ": use int64, float32 or string"));
      }
      c.dtype = *d;
    } else if (i < first_row.size()) {
      absl::string_view v = absl::StripAsciiWhitespace(first_row[i]);
      if (ParseCsvValue(v, CsvColumn{names[i], DType::kInt64}).ok()) c.dtype = DType::kInt64;
      else if (ParseCsvValue(v, CsvColumn{names[i], DType::kFloat32}).ok()) c.dtype = DType::kFloat32;
    }
    cols.push_back(c);
  }
  for (const auto& [name, type] : types) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("types.", name, ": no such column; columns: ", absl::StrJoin(names, ", ")));
    }
  }
  return cols;
}

}  // namespace

void RegisterTextSources(SourceRegistry& registry) {
  (void)registry.Register(SourceDescriptor{
      "jsonl",
      "One JSON object per line; each key becomes a field (integers int64, other numbers float32, strings, booleans, "
      "rectangular arrays).",
      {Required("files", ArgType::kStringOrList, "a glob, comma-separated globs, or a list of globs of .jsonl files"),
       Optional("fields", ArgType::kStringList, "keep only these keys (each must be present)"),
       Bounded(WithDefault("split_bytes", int64_t{16} << 20, "bytes per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        auto files = ExpandGlobs(a.StringOrList("files"));
        if (!files.ok()) return files.status();
        return std::unique_ptr<Source>(new JsonlSource(*std::move(files), a.StringList("fields"), a.Int("split_bytes")));
      }});
  (void)registry.Register(SourceDescriptor{
      "csv",
      "Comma-separated values; one field per column, typed int64, float32 or string.",
      {Required("files", ArgType::kStringOrList, "a glob, comma-separated globs, or a list of globs of CSV files"),
       WithDefault("header", true, "the first line of each file names the columns"),
       Optional("columns", ArgType::kStringList, "column names (required without a header)"),
       Optional("types", ArgType::kStringMap, "column -> int64|float32|string; others are inferred from the first row"),
       WithDefault("delimiter", ",", "field separator (one character)"),
       Bounded(WithDefault("split_bytes", int64_t{16} << 20, "bytes per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        std::string delim = a.String("delimiter", ",");
        if (delim.size() != 1) return absl::InvalidArgumentError("delimiter: must be exactly one character");
        auto files = ExpandGlobs(a.StringOrList("files"));
        if (!files.ok()) return files.status();
        auto cols = InferCsvColumns(files->front(), a.Bool("header", true), delim[0], a.StringList("columns"),
                                    a.StringMap("types"));
        if (!cols.ok()) return cols.status();
        return std::unique_ptr<Source>(new CsvSource(*std::move(files), *std::move(cols), a.Bool("header", true), delim[0],
                                                     a.Int("split_bytes")));
      }});
}

}  // namespace sluice::pipeline
