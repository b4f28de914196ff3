/* The Sluice plugin C ABI, version 1.
 *
 * A plugin is a shared library that adds element ops to pipelines. A spec loads it by path
 * (`plugins: [./libmyops.so]`) and then uses its ops like built-in ones (`- my_op: {...}`).
 *
 * The library exports one function, `sluice_plugin_init_v1`, which fills a table describing its
 * ops. The host calls each op's `apply` from many threads at once: it must be thread-safe and
 * keep no per-element state outside the `state` it created. Memory the plugin allocates for output
 * tensors comes from the host (`host->alloc_output`), so no ownership crosses the boundary.
 *
 * Compatibility: the host refuses a plugin whose abi_version differs from the host's, with an
 * error naming both versions. Fields are only ever added at the end of the structs, guarded by
 * struct_size.
 *
 * Extensions of version 1 (present when the op's struct_size covers them):
 *   order_properties_json  what AutoOrder may rely on when it reorders the op (docs/autoorder.md).
 */
#ifndef SLUICE_PLUGIN_H_
#define SLUICE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_PLUGIN_ABI_VERSION 1

/* Data types; the numbers match sluice::pipeline::DType. */
enum sluice_dtype {
  SLUICE_BOOL = 1,
  SLUICE_UINT8 = 2,
  SLUICE_INT8 = 3,
  SLUICE_UINT16 = 4,
  SLUICE_INT16 = 5,
  SLUICE_INT32 = 6,
  SLUICE_INT64 = 7,
  SLUICE_FLOAT32 = 8,
  SLUICE_FLOAT64 = 9,
  SLUICE_STRING = 10 /* read-only for plugins in v1: data is the first string's bytes */
};

/* A read-only view of one tensor of the element being processed. */
typedef struct sluice_tensor_view {
  int32_t dtype;
  int32_t rank;
  const int64_t* shape;
  const void* data;
  size_t nbytes;
} sluice_tensor_view;

typedef struct sluice_element sluice_element; /* opaque: the host's element */

/* Functions the host offers to an op while it runs. */
typedef struct sluice_host_api {
  size_t struct_size;
  /* Fills *out with the named field; returns 0, or -1 when there is no such field. */
  int (*get_field)(const sluice_element* element, const char* name, sluice_tensor_view* out);
  /* Creates (or replaces) the named field as a new zero-filled tensor and returns its writable
   * data, or NULL when the dtype/shape is invalid. */
  void* (*alloc_output)(sluice_element* element, const char* name, int32_t dtype, int32_t rank,
                        const int64_t* shape);
  /* Removes the named field; returns 0, or -1 when there is no such field. */
  int (*remove_field)(sluice_element* element, const char* name);
} sluice_host_api;

/* One op. `config_json` holds the op's arguments from the spec as a JSON object. */
typedef struct sluice_op_v1 {
  size_t struct_size;
  const char* name;    /* op name used in specs, e.g. "invert" */
  const char* summary; /* one line for `sluice pipeline explain` */
  /* Creates per-op state from its arguments; on failure returns NULL and writes a message. */
  void* (*create)(const char* config_json, char* error, size_t error_size);
  /* Transforms one element; returns 0, or non-zero and writes a message. `seed` is the
   * per-element seed for random ops. */
  int (*apply)(void* state, const sluice_host_api* host, sluice_element* element, uint64_t seed,
               char* error, size_t error_size);
  void (*destroy)(void* state);
  /* Optional extension: the op's reordering properties for AutoOrder, a JSON object in format
   * version SLUICE_PLUGIN_ORDER_PROPERTIES_VERSION, e.g.
   *   {"version": 1, "reads": [{"arg": "field", "default": "image"}], "writes": [{"arg": "field",
   *    "default": "image"}], "shape": "same", "dtype": "same", "size": "same", "cost": "input",
   *    "commutes": [{"op": "random_flip", "exact": true}, {"op": "resize", "exact": false, "tolerance": 0.01}]}
   * where {"arg": K} names the field given by key K of the op's config (docs/autoorder.md#plugins).
   * NULL, or a plugin built before this field existed (smaller struct_size): the op is a barrier,
   * nothing is moved across it. A malformed or contradictory declaration makes the host refuse the
   * plugin with an error naming the plugin and the op. */
  const char* order_properties_json;
} sluice_op_v1;

#define SLUICE_PLUGIN_ORDER_PROPERTIES_VERSION 1

typedef struct sluice_plugin_v1 {
  uint32_t abi_version; /* must be SLUICE_PLUGIN_ABI_VERSION */
  const char* plugin_name;
  size_t num_ops;
  const sluice_op_v1* ops;
} sluice_plugin_v1;

/* Exported by the plugin: fills *plugin; returns 0 on success. */
typedef int (*sluice_plugin_init_v1_fn)(uint32_t host_abi_version, sluice_plugin_v1* plugin);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_PLUGIN_H_ */
