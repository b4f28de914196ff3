// Text ops: `tokenize` turns a string field into int64 token ids, by bytes or by whitespace-split
// words hashed into a vocabulary (or looked up in a vocabulary file).
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline {
namespace {

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

class TokenizeOp : public ElementOp {
 public:
  TokenizeOp(std::string field, std::string output, bool bytes, bool lower, int64_t vocab_size,
             std::unordered_map<std::string, int64_t> vocab, int64_t unk, int64_t offset)
      : field_(std::move(field)), output_(std::move(output)), bytes_(bytes), lower_(lower), vocab_size_(vocab_size),
        vocab_(std::move(vocab)), unk_(unk), offset_(offset) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    auto t = GetField(e, field_, "tokenize");
    if (!t.ok()) return t.status();
    if ((*t)->dtype() != DType::kString || (*t)->rank() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tokenize: field '", field_, "' must be a scalar string, got ",
                                                     DTypeName((*t)->dtype()), ShapeToString((*t)->shape())));
    }
    absl::string_view text = (*t)->strings()[0];
    std::vector<int64_t> ids;
    if (bytes_) {
      ids.reserve(text.size());
      for (unsigned char c : text) ids.push_back(static_cast<int64_t>(c) + offset_);
    } else {
      for (absl::string_view word : absl::StrSplit(text, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
        std::string w = lower_ ? absl::AsciiStrToLower(word) : std::string(word);
        if (!vocab_.empty()) {
          auto it = vocab_.find(w);
          ids.push_back(it == vocab_.end() ? unk_ : it->second);
        } else {
          ids.push_back(static_cast<int64_t>(Fnv1a(w) % static_cast<uint64_t>(vocab_size_)) + offset_);
        }
      }
    }
    Tensor out = Tensor::Allocate(DType::kInt64, {static_cast<int64_t>(ids.size())});
    if (!ids.empty()) std::memcpy(out.mutable_raw(), ids.data(), ids.size() * sizeof(int64_t));
    e.Set(output_, std::move(out));
    return absl::OkStatus();
  }

 private:
  std::string field_, output_;
  bool bytes_, lower_;
  int64_t vocab_size_;
  std::unordered_map<std::string, int64_t> vocab_;
  int64_t unk_, offset_;
};

}  // namespace

void RegisterTextOps(OpRegistry& r) {
  auto order = std::make_shared<OrderDeclaration>();
  order->reads = {FieldRef::Arg("field")};
  order->writes = {FieldRef::ArgOr("output", "field")};
  order->shape = ShapeEffect::kData;
  order->dtype = DTypeEffect::Fixed(DType::kInt64);
  order->size = SizeEffect::kDepends;
  order->cost = CostDriver::kInput;
  OpDescriptor d{
      "tokenize", "Turns a string into int64 token ids: bytes (0-255 + offset) or whitespace-split words.",
      {Required("field", ArgType::kString, "scalar string field"),
       Optional("output", ArgType::kString, "output field (default: replace the input field)"),
       Choice("mode", {"bytes", "whitespace"}, "whitespace", "byte-level or whitespace tokens"),
       WithDefault("lowercase", true, "lower-case words first (whitespace mode)"),
       Bounded(WithDefault("vocab_size", int64_t{32768}, "hash buckets for words when no vocab_file is given"), 1, std::nullopt),
       Optional("vocab_file", ArgType::kString, "one token per line; the line number is the id"),
       WithDefault("unk_id", int64_t{0}, "id of words missing from vocab_file"),
       WithDefault("offset", int64_t{0}, "added to every id (e.g. to reserve 0 for padding)")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        std::unordered_map<std::string, int64_t> vocab;
        if (a.Has("vocab_file")) {
          std::ifstream in(a.String("vocab_file"));
          if (!in) return absl::NotFoundError(absl::StrCat("vocab_file: cannot open '", a.String("vocab_file"), "'"));
          std::string line;
          int64_t id = 0;
          while (std::getline(in, line)) vocab.emplace(line, id++);
          if (vocab.empty()) return absl::InvalidArgumentError(absl::StrCat("vocab_file: '", a.String("vocab_file"), "' is empty"));
        }
        std::string field = a.String("field");
        return std::unique_ptr<ElementOp>(new TokenizeOp(field, a.String("output", field), a.String("mode") == "bytes",
                                                         a.Bool("lowercase", true), a.Int("vocab_size"), std::move(vocab),
                                                         a.Int("unk_id"), a.Int("offset")));
      }};
  d.order = std::move(order);
  (void)r.Register(std::move(d));
}

}  // namespace sluice::pipeline
