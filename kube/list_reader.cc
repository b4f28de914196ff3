#include "kube/list_reader.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sluice::kube {
namespace {

using nlohmann::json;

// Builds one JSON value from SAX events (as nlohmann's own DOM parser does): a stack of the
// containers still open. Pointers stay valid: an open container's parent is not modified while
// it is open (objects are maps; an array only grows after its open child closed).
class TreeBuilder {
 public:
  void Begin(json* root) {
    root_ = root;
    stack_.clear();
  }
  void Key(std::string&& key) { key_ = std::move(key); }
  // Places a complete scalar value.
  void Value(json&& value) { Place(std::move(value)); }
  void Open(json&& container) { stack_.push_back(Place(std::move(container))); }
  // Closes the innermost container; true when that was the root (the value is complete).
  bool Close() {
    stack_.pop_back();
    return stack_.empty();
  }

 private:
  json* Place(json&& value) {
    if (stack_.empty()) {
      *root_ = std::move(value);
      return root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }

  json* root_ = nullptr;
  std::vector<json*> stack_;
  std::string key_;
};

class ListSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  ListSax(absl::string_view what, const ListItemCallback& on_item, json* head,
          const std::function<std::string()>& body_start)
      : what_(what), on_item_(on_item), head_(head), body_start_(body_start) {
    *head_ = json::object();
  }

  const absl::Status& status() const { return status_; }
  bool finished() const { return where_ == Where::kDone; }

  bool null() { return Scalar(json(nullptr)); }
  bool boolean(bool v) { return Scalar(json(v)); }
  bool number_integer(number_integer_t v) { return Scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) { return Scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) { return Scalar(json(v)); }
  bool string(string_t& v) { return Scalar(json(std::move(v))); }
  bool binary(binary_t&) { return Fail("the body holds binary data, not JSON"); }

  bool key(string_t& k) {
    if (building_) {
      builder_.Key(std::move(k));
    } else {
      key_ = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) {
    if (building_) {
      builder_.Open(json::object());
      return true;
    }
    switch (where_) {
      case Where::kStart:
        where_ = Where::kTop;
        return true;
      case Where::kTop:
        if (key_ == "items") return Fail("\"items\" is an object, not an array");
        BeginTree(&(*head_)[key_]);
        builder_.Open(json::object());
        return true;
      case Where::kItems:
        item_ = json();
        BeginTree(&item_);
        builder_.Open(json::object());
        return true;
      case Where::kDone:
        break;
    }
    return Fail("unexpected data after the list");
  }

  bool end_object() {
    if (building_) return CloseTree();
    where_ = Where::kDone;  // the list object itself
    return true;
  }

  bool start_array(std::size_t) {
    if (building_) {
      builder_.Open(json::array());
      return true;
    }
    switch (where_) {
      case Where::kStart:
        return Fail("the body is a JSON array, not a list object");
      case Where::kTop:
        if (key_ == "items") {
          where_ = Where::kItems;
          return true;
        }
        BeginTree(&(*head_)[key_]);
        builder_.Open(json::array());
        return true;
      case Where::kItems:
        return Fail(absl::StrCat("items[", index_, "] is an array, not an object"));
      case Where::kDone:
        break;
    }
    return Fail("unexpected data after the list");
  }

  bool end_array() {
    if (building_) return CloseTree();
    where_ = Where::kTop;  // the end of "items"
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    std::string start = body_start_ ? body_start_() : std::string();
    return Fail(absl::StrCat("the body is not JSON (byte ", position, ": ", e.what(), ")",
                             start.empty() ? "" : "; it begins: ", start));
  }

 private:
  enum class Where { kStart, kTop, kItems, kDone };

  bool Scalar(json&& value) {
    if (building_) {
      builder_.Value(std::move(value));
      return true;
    }
    switch (where_) {
      case Where::kStart:
        return Fail(absl::StrCat("the body is a JSON ", value.type_name(), ", not a list object"));
      case Where::kTop:
        if (key_ == "items") {
          if (value.is_null()) return true;  // "items": null, an empty list
          return Fail(absl::StrCat("\"items\" is a ", value.type_name(), ", not an array"));
        }
        (*head_)[key_] = std::move(value);
        return true;
      case Where::kItems:
        return Fail(absl::StrCat("items[", index_, "] is a ", value.type_name(), ", not an object"));
      case Where::kDone:
        break;
    }
    return Fail("unexpected data after the list");
  }

  void BeginTree(json* root) {
    builder_.Begin(root);
    building_ = true;
  }

  bool CloseTree() {
    if (!builder_.Close()) return true;
    building_ = false;
    if (where_ != Where::kItems) return true;
    // An item is complete.
    const json* meta = item_.contains("metadata") ? &item_["metadata"] : nullptr;
    if (meta == nullptr || !meta->is_object() || !meta->contains("name") || !(*meta)["name"].is_string()) {
      return Fail(absl::StrCat("items[", index_, "] has no metadata.name (every Kubernetes object has one)"));
    }
    absl::Status status = on_item_(index_, std::move(item_));
    item_ = json();
    ++index_;
    if (!status.ok()) {
      status_ = std::move(status);
      return false;
    }
    return true;
  }

  bool Fail(absl::string_view message) {
    if (status_.ok()) status_ = absl::DataLossError(absl::StrCat(what_, ": ", message));
    return false;
  }

  const std::string what_;
  const ListItemCallback& on_item_;
  json* const head_;
  const std::function<std::string()>& body_start_;
  Where where_ = Where::kStart;
  std::string key_;
  bool building_ = false;
  TreeBuilder builder_;
  json item_;
  size_t index_ = 0;
  absl::Status status_;
};

template <typename Input>
absl::Status Read(Input&& input, absl::string_view what, const ListItemCallback& on_item, json* head,
                  const std::function<std::string()>& body_start) {
  ListSax sax(what, on_item, head, body_start);
  bool ok = json::sax_parse(std::forward<Input>(input), &sax, json::input_format_t::json, /*strict=*/true);
  if (!sax.status().ok()) return sax.status();
  if (!ok || !sax.finished()) return absl::DataLossError(absl::StrCat(what, ": the body is not a complete list object"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadList(std::istream& in, absl::string_view what, const ListItemCallback& on_item, json* head,
                      const std::function<std::string()>& body_start) {
  return Read(in, what, on_item, head, body_start);
}

absl::Status ReadList(absl::string_view text, absl::string_view what, const ListItemCallback& on_item, json* head) {
  std::function<std::string()> body_start = [text] { return std::string(text.substr(0, kBodyStartBytes)); };
  return Read(text, what, on_item, head, body_start);
}

}  // namespace sluice::kube
