#include "dataplane/pipeline/plugin.h"

#include <dlfcn.h>

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
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

}  // namespace

absl::Status LoadPlugin(const std::string& path) {
  absl::MutexLock lock(&loaded_mu);
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
  for (size_t i = 0; i < plugin.num_ops; ++i) {
    const sluice_op_v1* op = &plugin.ops[i];
    if (op->name == nullptr || op->create == nullptr || op->apply == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("plugin '", path, "' op #", i, " lacks a name, create or apply"));
    }
    OpDescriptor d;
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
