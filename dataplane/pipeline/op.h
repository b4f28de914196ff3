// Element ops: the per-element functions a `map` step applies (decode_jpeg, resize, normalize,
// parse_example, plugin ops, ...), and the registry that names them.
//
// An ElementOp is created once per pipeline from validated arguments and then applied to many
// elements from many threads at once: Apply() must be thread-safe and must not keep per-element
// state. Random ops draw from an RNG seeded with the `seed` passed to Apply(), which the executor
// derives from the pipeline seed, the op's position and the element's key, so results do not
// depend on which thread ran the op.
#ifndef SLUICE_DATAPLANE_PIPELINE_OP_H_
#define SLUICE_DATAPLANE_PIPELINE_OP_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/args.h"
#include "dataplane/pipeline/op_properties.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

class ElementOp {
 public:
  virtual ~ElementOp() = default;
  // Transforms `element` in place. Errors describe the bad data (e.g. "field 'image': not a JPEG").
  // absl::DataLossError means "drop this element": an op configured to skip bad data (e.g.
  // decode_jpeg with on_error: skip) returns it, and the map stage drops and counts the element
  // whatever the map's own on_error says.
  virtual absl::Status Apply(Element& element, uint64_t seed) const = 0;
  // A short description for plans (e.g. "decode_jpeg(image, dct_scale=1/2)").
  virtual std::string Describe() const { return ""; }
};

using ElementOpFactory = std::function<absl::StatusOr<std::unique_ptr<ElementOp>>(const Args& args)>;

// Builds one op replacing this op and the op right after it in the same map (e.g. decode_jpeg
// followed by random_resized_crop becomes a region-of-interest decode). Returns nullptr when the
// pair cannot be fused.
using ElementOpFuser = std::function<absl::StatusOr<std::unique_ptr<ElementOp>>(
    const Args& args, absl::string_view next_op, const Args& next_args)>;

struct OpDescriptor {
  std::string name;
  std::string summary;
  std::vector<ArgSpec> args;
  ElementOpFactory factory;
  ElementOpFuser fuse_with_next = nullptr;  // optional
  bool random = false;            // draws random numbers (uses the per-element seed)
  bool filter = false;            // a predicate op: used by `filter`, returns keep/drop via Keep()
  // What AutoOrder may rely on when it reorders ops (op_properties.h); null: the op is a barrier.
  std::shared_ptr<const OrderDeclaration> order = nullptr;
};

// A predicate used by `filter` steps. Thread-safe like ElementOp.
class ElementPredicate {
 public:
  virtual ~ElementPredicate() = default;
  virtual absl::StatusOr<bool> Keep(const Element& element) const = 0;
};

// Maps op names to descriptors: the built-in ops, plus plugin ops as plugins are loaded.
// Thread-safe. Descriptors are never removed, so returned pointers stay valid.
class OpRegistry {
 public:
  // The registry with every built-in op registered.
  static OpRegistry& Builtin();

  absl::Status Register(OpDescriptor descriptor);
  const OpDescriptor* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;
  // "Unknown op 'x'; known ops: a, b, c".
  absl::Status UnknownOpError(absl::string_view name, absl::string_view where) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, OpDescriptor, std::less<>> ops_ ABSL_GUARDED_BY(mu_);
};

// Registration functions, one per op family (each in its own file).
void RegisterTensorOps(OpRegistry& registry);   // cast, one_hot, reshape, rename, select, pad, truncate
void RegisterImageOps(OpRegistry& registry);    // decode_jpeg, decode_png, resize, crops, flip, normalize
void RegisterTextOps(OpRegistry& registry);     // tokenize
void RegisterExampleOps(OpRegistry& registry);  // parse_example (tf.train.Example)

// Helpers for op implementations.
absl::StatusOr<Tensor*> GetMutableField(Element& element, absl::string_view field, absl::string_view op);
absl::StatusOr<const Tensor*> GetField(const Element& element, absl::string_view field, absl::string_view op);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_OP_H_
