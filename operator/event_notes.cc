#include "operator/event_notes.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace sluice::op {
namespace {

// A run of consecutive ordinals.
struct Run {
  int64_t lo = 0;
  int64_t hi = 0;
};

// Names sharing a prefix ("ds-worker-remote-") and their ordinals as runs; or one name without an
// ordinal (`plain`).
struct NameGroup {
  std::string prefix;
  bool plain = false;
  std::vector<Run> runs;
};

// Splits "ds-worker-remote-12" into ("ds-worker-remote-", 12); false without a plain ordinal.
bool SplitOrdinal(const std::string& name, std::string* prefix, int64_t* ordinal) {
  size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 >= name.size()) return false;
  std::string digits = name.substr(dash + 1);
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return false;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  if (!absl::SimpleAtoi(digits, ordinal)) return false;
  *prefix = name.substr(0, dash + 1);
  return true;
}

std::vector<NameGroup> GroupNames(const std::vector<std::string>& names) {
  std::vector<NameGroup> groups;
  std::map<std::string, size_t> index;                 // prefix -> group
  std::map<size_t, std::set<int64_t>> ordinals;        // group -> ordinals
  std::set<std::string> plain_seen;
  for (const std::string& name : names) {
    std::string prefix;
    int64_t ordinal = 0;
    if (SplitOrdinal(name, &prefix, &ordinal)) {
      auto [it, added] = index.try_emplace(prefix, groups.size());
      if (added) groups.push_back(NameGroup{prefix, false, {}});
      ordinals[it->second].insert(ordinal);
    } else if (plain_seen.insert(name).second) {
      groups.push_back(NameGroup{name, true, {}});
    }
  }
  for (auto& [i, set] : ordinals) {
    for (int64_t n : set) {
      std::vector<Run>& runs = groups[i].runs;
      if (!runs.empty() && runs.back().hi + 1 == n) {
        runs.back().hi = n;
      } else {
        runs.push_back(Run{n, n});
      }
    }
  }
  return groups;
}

size_t CountNames(const std::vector<NameGroup>& groups) {
  size_t n = 0;
  for (const NameGroup& g : groups) {
    if (g.plain) {
      ++n;
      continue;
    }
    for (const Run& r : g.runs) n += static_cast<size_t>(r.hi - r.lo + 1);
  }
  return n;
}

std::string RenderGroups(const std::vector<NameGroup>& groups) {
  std::string out;
  for (const NameGroup& g : groups) {
    if (!out.empty()) out += ", ";
    if (g.plain) {
      out += g.prefix;
      continue;
    }
    if (g.runs.size() == 1 && g.runs[0].lo == g.runs[0].hi) {
      absl::StrAppend(&out, g.prefix, g.runs[0].lo);
      continue;
    }
    absl::StrAppend(&out, g.prefix, "[");
    for (size_t i = 0; i < g.runs.size(); ++i) {
      const Run& r = g.runs[i];
      if (i > 0) out += ",";
      if (r.lo == r.hi) {
        absl::StrAppend(&out, r.lo);
      } else {
        absl::StrAppend(&out, r.lo, r.hi == r.lo + 1 ? "," : "-", r.hi);
      }
    }
    out += "]";
  }
  return out;
}

std::string Fill(const std::string& note, const std::vector<NameGroup>& groups) {
  if (groups.empty()) return note;
  std::string names = RenderGroups(groups);
  std::string plural = CountNames(groups) > 1 ? "s" : "";
  if (note.find("{}") == std::string::npos) {
    return absl::StrCat(absl::StrReplaceAll(note, {{"{s}", plural}}), note.empty() ? "" : " ", names);
  }
  return absl::StrReplaceAll(note, {{"{}", names}, {"{s}", plural}});
}

// Renders `note` with `groups`, split into pieces of at most `limit` bytes where possible (a piece
// naming a single run or plain name is kept whole even if longer).
std::vector<std::string> SplitRender(const std::string& note, const std::vector<NameGroup>& groups, size_t limit) {
  std::string whole = Fill(note, groups);
  if (whole.size() <= limit || groups.empty()) return {whole};
  std::vector<std::string> pieces;
  std::vector<NameGroup> chunk;
  size_t atoms = 0;
  auto add = [&](const NameGroup& g, const Run* run) {
    if (run == nullptr) {
      chunk.push_back(g);
    } else if (!chunk.empty() && !chunk.back().plain && chunk.back().prefix == g.prefix) {
      chunk.back().runs.push_back(*run);
    } else {
      chunk.push_back(NameGroup{g.prefix, false, {*run}});
    }
    ++atoms;
  };
  auto remove_last = [&]() {
    if (chunk.back().plain || chunk.back().runs.size() == 1) {
      chunk.pop_back();
    } else {
      chunk.back().runs.pop_back();
    }
    --atoms;
  };
  for (const NameGroup& g : groups) {
    std::vector<const Run*> runs;
    if (g.plain) {
      runs.push_back(nullptr);
    } else {
      for (const Run& r : g.runs) runs.push_back(&r);
    }
    for (const Run* r : runs) {
      add(g, r);
      if (atoms > 1 && Fill(note, chunk).size() > limit) {
        remove_last();
        pieces.push_back(Fill(note, chunk));
        chunk.clear();
        atoms = 0;
        add(g, r);
      }
    }
  }
  if (!chunk.empty()) pieces.push_back(Fill(note, chunk));
  return pieces;
}

}  // namespace

std::string CompactNames(const std::vector<std::string>& names) { return RenderGroups(GroupNames(names)); }

std::string RenderNote(const EmitEvent& event) { return Fill(event.note, GroupNames(event.names)); }

std::vector<EmitEvent> RenderEvents(const std::vector<EmitEvent>& events, size_t max_note_bytes) {
  using Key = std::tuple<std::string, std::string, std::string>;  // type, reason, action
  struct Template {
    std::string note;
    std::vector<std::string> names;
  };
  std::vector<Key> order;
  std::map<Key, std::vector<Template>> templates;
  for (const EmitEvent& e : events) {
    Key key{e.type, e.reason, e.action};
    auto [it, added] = templates.try_emplace(key);
    if (added) order.push_back(key);
    auto t = std::find_if(it->second.begin(), it->second.end(), [&](const Template& x) { return x.note == e.note; });
    if (t == it->second.end()) {
      it->second.push_back(Template{e.note, e.names});
    } else {
      t->names.insert(t->names.end(), e.names.begin(), e.names.end());
    }
  }
  std::vector<EmitEvent> out;
  for (const Key& key : order) {
    std::vector<std::string> pieces;
    for (const Template& t : templates[key]) {
      for (std::string& p : SplitRender(t.note, GroupNames(t.names), max_note_bytes)) pieces.push_back(std::move(p));
    }
    // Pack the pieces into as few notes as fit.
    std::string note;
    auto flush = [&]() {
      out.push_back(EmitEvent{std::get<0>(key), std::get<1>(key), std::get<2>(key), note, {}});
      note.clear();
    };
    for (const std::string& p : pieces) {
      if (!note.empty() && note.size() + 2 + p.size() > max_note_bytes) flush();
      if (!note.empty()) note += "; ";
      note += p;
    }
    if (!note.empty() || pieces.empty()) flush();
  }
  return out;
}

}  // namespace sluice::op
