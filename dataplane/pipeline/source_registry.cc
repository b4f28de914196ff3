#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dataplane/pipeline/source.h"

namespace sluice::pipeline {

std::string Split::DebugString() const {
  std::string out = absl::StrCat("#", index, " ", path);
  if (begin != 0 || end >= 0) {
    absl::StrAppend(&out, "[", begin, ":", end < 0 ? std::string("end") : absl::StrCat(end), "]");
  }
  if (skip > 0) absl::StrAppend(&out, " skip ", skip);
  return out;
}

namespace {

// A split read under leases: see OpenSplit.
class LeasedSplitReader : public SplitReader {
 public:
  LeasedSplitReader(std::unique_ptr<SplitReader> inner, Split split, SplitProvider* provider)
      : inner_(std::move(inner)), split_(std::move(split)), provider_(provider), renew_at_(split_.skip) {}

  absl::StatusOr<std::optional<Element>> Next() override {
    if (done_) return std::optional<Element>();
    while (position_ < split_.skip) {
      auto skipped = inner_->Next();
      if (!skipped.ok()) return skipped.status();
      if (!skipped->has_value()) return End();
      ++position_;
    }
    if (provider_ != nullptr && provider_->ReleaseRequested()) {
      done_ = true;
      provider_->SplitReleased(split_, position_);
      return std::optional<Element>();
    }
    if (provider_ != nullptr && position_ >= renew_at_) {
      auto lease = provider_->RenewLease(split_, position_);
      if (!lease.ok()) return lease.status();
      if (lease->end < 0) {
        renew_at_ = std::numeric_limits<int64_t>::max();
      } else if (lease->end <= position_) {
        return absl::InternalError(absl::StrCat("split ", split_.DebugString(), ": the lease ends at element ",
                                                lease->end, ", before element ", position_, " the reader is at"));
      } else {
        renew_at_ = std::clamp(lease->renew_at, position_ + 1, lease->end);
      }
    }
    auto next = inner_->Next();
    if (!next.ok()) return next;
    if (!next->has_value()) return End();
    ++position_;
    return next;
  }

 private:
  absl::StatusOr<std::optional<Element>> End() {
    done_ = true;
    if (provider_ != nullptr) provider_->SplitFinished(split_, position_);
    return std::optional<Element>();
  }

  std::unique_ptr<SplitReader> inner_;
  const Split split_;
  SplitProvider* const provider_;
  int64_t position_ = 0;
  int64_t renew_at_;
  bool done_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SplitReader>> OpenSplit(const Source& source, const Split& split,
                                                       const SourceContext& context, SplitProvider* provider) {
  if (split.skip < 0) {
    return absl::InvalidArgumentError(absl::StrCat("split ", split.DebugString(), ": skip must be >= 0"));
  }
  auto reader = source.Open(split, context);
  if (!reader.ok()) return reader.status();
  const bool leases = provider != nullptr && provider->UsesLeases();
  if (split.skip == 0 && !leases) return reader;
  return std::unique_ptr<SplitReader>(new LeasedSplitReader(*std::move(reader), split, leases ? provider : nullptr));
}

SourceRegistry& SourceRegistry::Builtin() {
  static SourceRegistry* registry = [] {
    auto* r = new SourceRegistry();
    RegisterBasicSources(*r);
    RegisterTextSources(*r);
    RegisterFileSources(*r);
    RegisterTFRecordSource(*r);
    return r;
  }();
  return *registry;
}

absl::Status SourceRegistry::Register(SourceDescriptor descriptor) {
  if (sources_.count(descriptor.name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("source '", descriptor.name, "' is already registered"));
  }
  for (auto& common : CommonSourceArgs()) descriptor.args.push_back(std::move(common));
  std::string name = descriptor.name;
  sources_.emplace(std::move(name), std::move(descriptor));
  return absl::OkStatus();
}

const SourceDescriptor* SourceRegistry::Find(absl::string_view name) const {
  auto it = sources_.find(name);
  return it == sources_.end() ? nullptr : &it->second;
}

std::vector<std::string> SourceRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, d] : sources_) names.push_back(name);
  return names;
}

std::vector<ArgSpec> CommonSourceArgs() {
  return {
      Choice("on_error", {"fail", "skip"}, "fail",
             "What to do with a corrupt record or undecodable file: fail the pipeline with an error naming "
             "the file and offset, or skip it and count it in the stage's errors_skipped."),
  };
}

absl::StatusOr<std::vector<std::string>> ExpandGlob(absl::string_view patterns) {
  std::vector<std::string> files;
  for (absl::string_view raw : absl::StrSplit(patterns, ',', absl::SkipEmpty())) {
    std::string pattern(absl::StripAsciiWhitespace(raw));
    glob_t g{};
    int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      return absl::NotFoundError(absl::StrCat("no files match '", pattern,
                                              "'; check the path (relative paths are resolved from the "
                                              "working directory)"));
    }
    if (rc != 0) {
      globfree(&g);
      return absl::InvalidArgumentError(absl::StrCat("cannot expand file pattern '", pattern, "'"));
    }
    std::vector<std::string> matched;
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st {};
      if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) matched.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
    if (matched.empty()) {
      return absl::NotFoundError(absl::StrCat("'", pattern, "' matches no regular files"));
    }
    std::sort(matched.begin(), matched.end());
    files.insert(files.end(), matched.begin(), matched.end());
  }
  if (files.empty()) return absl::InvalidArgumentError("empty file pattern; give a path or a glob");
  return files;
}

absl::StatusOr<std::vector<std::string>> ExpandGlobs(const std::vector<std::string>& patterns) {
  if (patterns.empty()) return absl::InvalidArgumentError("no file patterns given");
  std::vector<std::string> files;
  for (const auto& p : patterns) {
    auto expanded = ExpandGlob(p);
    if (!expanded.ok()) return expanded.status();
    files.insert(files.end(), expanded->begin(), expanded->end());
  }
  return files;
}

ListSplitProvider::ListSplitProvider(std::vector<Split> splits, int64_t num_shards, int64_t shard_index)
    : splits_([&] {
        if (num_shards <= 1) return splits;
        std::vector<Split> mine;
        for (auto& s : splits) {
          if (static_cast<int64_t>(s.index % static_cast<uint64_t>(num_shards)) == shard_index) mine.push_back(s);
        }
        return mine;
      }()) {}

absl::StatusOr<std::optional<Split>> ListSplitProvider::GetNext() {
  absl::MutexLock lock(&mu_);
  if (next_ >= splits_.size()) return std::optional<Split>();
  return std::optional<Split>(splits_[next_++]);
}

absl::Status ListSplitProvider::Reset() {
  absl::MutexLock lock(&mu_);
  next_ = 0;
  return absl::OkStatus();
}

}  // namespace sluice::pipeline
