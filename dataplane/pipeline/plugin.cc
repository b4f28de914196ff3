#include "dataplane/pipeline/plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/sluice_plugin.h"

namespace sluice::pipeline {
namespace {

nlohmann::json ToJson(const Value& v) {
  switch (v.kind_case()) {
    case Value::kIntValue: return v.int_value();
    case Value::kFloatValue: return v.float_value();
    case Value::kStringValue: return v.string_value();
    case Value::kBoolValue: return v.bool_value();
    case Value::kListValue: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& item : v.list_value().values()) arr.push_back(ToJson(item));
      return arr;
    }
    case Value::kMapValue: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& e : v.map_value().entries()) obj[e.name()] = ToJson(e.value());
      return obj;
    }
    case Value::KIND_NOT_SET: return nullptr;
  }
  return nullptr;
}

int HostGetField(const sluice_element* element, const char* name, sluice_tensor_view* out) {
  const auto* e = reinterpret_cast<const Element*>(element);
  const Tensor* t = e->Find(name);
  if (t == nullptr) return -1;
  out->dtype = static_cast<int32_t>(t->dtype());
  out->rank = t->rank();
  out->shape = t->shape().data();
  out->data = t->dtype() == DType::kString ? static_cast<const void*>(t->strings().empty() ? nullptr : t->strings()[0].data()) : static_cast<const void*>(t->raw());
  out->nbytes = t->dtype() == DType::kString ? (t->strings().empty() ? 0 : t->strings()[0].size()) : t->nbytes();
  return 0;
}

void* HostAllocOutput(sluice_element* element, const char* name, int32_t dtype, int32_t rank, const int64_t* shape) {
  if (dtype < SLUICE_BOOL || dtype > SLUICE_FLOAT64 || rank < 0 || rank > 8) return nullptr;
  Shape s;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) return nullptr;
    s.push_back(shape[i]);
  }
  Tensor t = Tensor::Allocate(static_cast<DType>(dtype), s);
  void* data = t.mutable_raw();
  reinterpret_cast<Element*>(element)->Set(name, std::move(t));
  return data;
}

int HostRemoveField(sluice_element* element, const char* name) {
  return reinterpret_cast<Element*>(element)->Erase(name) ? 0 : -1;
}

const sluice_host_api kHostApi = {sizeof(sluice_host_api), HostGetField, HostAllocOutput, HostRemoveField};

// Wraps one plugin op; owns the plugin's per-op state.
class PluginOp : public ElementOp {
 public:
  PluginOp(const sluice_op_v1* op, void* state) : op_(op), state_(state) {}
  ~PluginOp() override {
    if (op_->destroy != nullptr) op_->destroy(state_);
  }
  absl::Status Apply(Element& element, uint64_t seed) const override {
    char error[512] = {0};
    int rc = op_->apply(state_, &kHostApi, reinterpret_cast<sluice_element*>(&element), seed, error, sizeof(error));
    if (rc != 0) {
      error[sizeof(error) - 1] = 0;
      return absl::InvalidArgumentError(absl::StrCat(op_->name, " (plugin): ", error[0] ? error : "failed"));
    }
    return absl::OkStatus();
  }
  std::string Describe() const override { return absl::StrCat(op_->name, " (plugin)"); }

 private:
  const sluice_op_v1* op_;
  void* state_;
};

// Plugin ops take any arguments: the plugin validates them in create().
ArgSpec PluginArgs() { return Optional("config", ArgType::kMap, "arguments passed to the plugin as JSON"); }

absl::Mutex loaded_mu;
std::set<std::string>& Loaded() {
  static auto* loaded = new std::set<std::string>();
  return *loaded;
}

// RestrictPlugins' allow-list (resolved directories) and flag name; unset: unrestricted.
struct Restriction {
  std::vector<std::string> dirs;
  std::string flag;
};
std::optional<Restriction>& CurrentRestriction() {
  static auto* restriction = new std::optional<Restriction>();
  return *restriction;
}

std::optional<std::string> RealPath(const std::string& path, std::string* error) {
  char buffer[PATH_MAX];
  if (::realpath(path.c_str(), buffer) == nullptr) {
    *error = std::strerror(errno);
    return std::nullopt;
  }
  return std::string(buffer);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolvePluginDirs(const std::vector<std::string>& dirs, absl::string_view flag) {
  std::vector<std::string> resolved;
  for (const std::string& dir : dirs) {
    if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": an empty directory name"));
    std::string error;
    std::optional<std::string> real = RealPath(dir, &error);
    if (!real) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot resolve '", dir, "': ", error));
    resolved.push_back(*real);
  }
  return resolved;
}

absl::StatusOr<std::string> CheckPluginPath(const std::string& path, const std::vector<std::string>& resolved_dirs,
                                            absl::string_view flag) {
  if (resolved_dirs.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' is refused: this process loads no plugins sent to it (start it with ",
                                                      flag, "=DIR to allow plugins under DIR)"));
  }
  const std::string allowed = absl::StrJoin(resolved_dirs, ", ");
  if (path.find('/') == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' has no directory (dlopen would search the library path); give its path under ",
                                                      flag, " (", allowed, ")"));
  }
  std::string error;
  std::optional<std::string> real = RealPath(path, &error);
  if (!real) {
    return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' cannot be resolved (", error,
                                                      "); plugins must be files under ", flag, " (", allowed, ")"));
  }
  for (const std::string& dir : resolved_dirs) {
    if (dir == "/" || absl::StartsWith(*real, dir + "/")) return *real;
  }
  return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' (resolved: '", *real, "') is outside ", flag,
                                                    " (", allowed, "); add its directory with ", flag,
                                                    " to allow it"));
}

absl::Status CheckPipelinePlugins(const PipelineDef& def, const std::vector<std::string>& resolved_dirs,
                                  absl::string_view flag) {
  for (int i = 0; i < def.plugins_size(); ++i) {
    auto checked = CheckPluginPath(def.plugins(i).path(), resolved_dirs, flag);
    if (!checked.ok()) {
      return absl::Status(checked.status().code(), absl::StrCat("plugins[", i, "]: ", checked.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RestrictPlugins(const std::vector<std::string>& dirs, const std::string& flag) {
  auto resolved = ResolvePluginDirs(dirs, flag);
  if (!resolved.ok()) return resolved.status();
  absl::MutexLock lock(&loaded_mu);
  CurrentRestriction() = Restriction{*std::move(resolved), flag};
  return absl::OkStatus();
}

absl::Status LoadPlugin(const std::string& requested_path) {
  absl::MutexLock lock(&loaded_mu);
  std::string path = requested_path;
  if (const std::optional<Restriction>& restriction = CurrentRestriction(); restriction.has_value()) {
    // Load what was checked: the resolved path (no symlink left to swap afterwards).
    auto checked = CheckPluginPath(requested_path, restriction->dirs, restriction->flag);
    if (!checked.ok()) return checked.status();
    path = *std::move(checked);
  }
  if (Loaded().count(path) != 0) return absl::OkStatus();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load plugin '", path, "': ", err ? err : "unknown error",
                                            " (give the shared library's path, e.g. ./libmyops.so)"));
  }
  auto init = reinterpret_cast<sluice_plugin_init_v1_fn>(::dlsym(handle, "sluice_plugin_init_v1"));
  if (init == nullptr) {
    ::dlclose(handle);
    return absl::InvalidArgumentError(
        absl::StrCat("plugin '", path, "' does not export sluice_plugin_init_v1; see sluice_plugin.h"));
  }
  sluice_plugin_v1 plugin{};
  if (init(SLUICE_PLUGIN_ABI_VERSION, &plugin) != 0) {
    ::dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' refused to initialise"));
  }
  if (plugin.abi_version != SLUICE_PLUGIN_ABI_VERSION) {
    ::dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat("plugin '", path, "' uses ABI version ", plugin.abi_version,
                                                      " but this Sluice uses version ", SLUICE_PLUGIN_ABI_VERSION,
                                                      "; rebuild the plugin against this sluice_plugin.h"));
  }
  // Check every op (and its AutoOrder declaration) before registering any.
  std::vector<std::shared_ptr<const OrderDeclaration>> orders(plugin.num_ops);
  for (size_t i = 0; i < plugin.num_ops; ++i) {
    const sluice_op_v1* op = &plugin.ops[i];
    if (op->name == nullptr || op->create == nullptr || op->apply == nullptr) {
      ::dlclose(handle);
      return absl::InvalidArgumentError(absl::StrCat("plugin '", path, "' op #", i, " lacks a name, create or apply"));
    }
    constexpr size_t kOrderEnd = offsetof(sluice_op_v1, order_properties_json) + sizeof(op->order_properties_json);
    if (op->struct_size >= kOrderEnd && op->order_properties_json != nullptr) {
      auto order = ParsePluginOrderDeclaration(op->order_properties_json, path, op->name);
      if (!order.ok()) {
        ::dlclose(handle);
        return order.status();
      }
      orders[i] = std::make_shared<const OrderDeclaration>(*std::move(order));
    }
  }
  for (size_t i = 0; i < plugin.num_ops; ++i) {
    const sluice_op_v1* op = &plugin.ops[i];
    OpDescriptor d;
    d.order = orders[i];
    d.name = op->name;
    d.summary = op->summary ? op->summary : "";
    d.args = {PluginArgs()};
    d.factory = [op](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
      std::string config = "{}";
      if (const Value* v = args.Raw("config")) config = ToJson(*v).dump();
      char error[512] = {0};
      void* state = op->create(config.c_str(), error, sizeof(error));
      if (state == nullptr && error[0] != 0) {
        error[sizeof(error) - 1] = 0;
        return absl::InvalidArgumentError(absl::StrCat(op->name, " (plugin): ", error));
      }
      return std::unique_ptr<ElementOp>(new PluginOp(op, state));
    };
    if (auto s = OpRegistry::Builtin().Register(std::move(d)); !s.ok()) {
      return absl::AlreadyExistsError(absl::StrCat("plugin '", path, "': ", s.message()));
    }
  }
  Loaded().insert(path);
  return absl::OkStatus();
}

}  // namespace sluice::pipeline
