/* A test plugin for the Sluice plugin ABI: `add_constant` reads an int64 scalar field and writes
 * field + "_plus" = value + add. Its config is {"field": name, "add": number}. It is built as an op
 * of a plugin from before the order_properties_json extension (its struct_size ends before it), so
 * AutoOrder treats it as a barrier. `add_in_place` adds `add` to every value of an int64 field
 * and declares its AutoOrder properties. Built a second time with SLUICE_TEST_BAD_ORDER, where
 * add_in_place's declaration contradicts itself (the host must refuse that plugin). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/pipeline/sluice_plugin.h"

typedef struct {
  char field[64];
  char output[80];
  long long add;
} add_state;

static void* add_create(const char* config, char* error, size_t error_size) {
  const char* f = strstr(config, "\"field\":\"");
  if (f == NULL) {
    snprintf(error, error_size, "config needs \"field\"");
    return NULL;
  }
  add_state* s = calloc(1, sizeof(add_state));
  f += 9;
  size_t n = strcspn(f, "\"");
  if (n >= sizeof(s->field)) n = sizeof(s->field) - 1;
  memcpy(s->field, f, n);
  snprintf(s->output, sizeof(s->output), "%s_plus", s->field);
  const char* a = strstr(config, "\"add\":");
  s->add = a ? atoll(a + 6) : 0;
  return s;
}

static int add_apply(void* state, const sluice_host_api* host, sluice_element* element, uint64_t seed, char* error,
                     size_t error_size) {
  (void)seed;
  add_state* s = state;
  sluice_tensor_view in;
  if (host->get_field(element, s->field, &in) != 0 || in.dtype != SLUICE_INT64 || in.rank != 0) {
    snprintf(error, error_size, "field %s must be an int64 scalar", s->field);
    return 1;
  }
  long long v;
  memcpy(&v, in.data, sizeof(v));
  long long* out = host->alloc_output(element, s->output, SLUICE_INT64, 0, NULL);
  *out = v + s->add;
  return 0;
}

static void add_destroy(void* state) { free(state); }

static int add_in_place_apply(void* state, const sluice_host_api* host, sluice_element* element, uint64_t seed,
                              char* error, size_t error_size) {
  (void)seed;
  add_state* s = state;
  sluice_tensor_view in;
  if (host->get_field(element, s->field, &in) != 0 || in.dtype != SLUICE_INT64) {
    snprintf(error, error_size, "field %s must be int64", s->field);
    return 1;
  }
  int64_t shape[8];
  size_t n = 1;
  for (int i = 0; i < in.rank && i < 8; ++i) {
    shape[i] = in.shape[i];
    n *= (size_t)in.shape[i];
  }
  long long* values = malloc(n * sizeof(long long) + 1);
  memcpy(values, in.data, n * sizeof(long long));
  long long* out = host->alloc_output(element, s->field, SLUICE_INT64, in.rank, shape);
  for (size_t i = 0; i < n; ++i) out[i] = values[i] + s->add;
  free(values);
  return 0;
}

#ifdef SLUICE_TEST_BAD_ORDER
/* Contradictory: the shape and dtype stay the same, yet the size is said to grow. */
#define ADD_IN_PLACE_ORDER                                                                         \
  "{\"version\": 1, \"reads\": [{\"arg\": \"field\"}], \"writes\": [{\"arg\": \"field\"}], " \
  "\"shape\": \"same\", \"dtype\": \"same\", \"size\": \"larger\"}"
#else
#define ADD_IN_PLACE_ORDER                                                                         \
  "{\"version\": 1, \"reads\": [{\"arg\": \"field\"}], \"writes\": [{\"arg\": \"field\"}], " \
  "\"shape\": \"same\", \"dtype\": \"same\", \"size\": \"same\", \"cost\": \"input\", "    \
  "\"commutes\": [{\"op\": \"reshape\", \"exact\": true}]}"
#endif

static const sluice_op_v1 kOps[] = {
    /* As built against the header before order_properties_json: the host must not read it. */
    {offsetof(sluice_op_v1, order_properties_json), "add_constant", "adds a constant to an int64 field", add_create,
     add_apply, add_destroy, "not JSON: must be ignored"},
    {sizeof(sluice_op_v1), "add_in_place", "adds a constant to every value of an int64 field", add_create,
     add_in_place_apply, add_destroy, ADD_IN_PLACE_ORDER},
};

int sluice_plugin_init_v1(uint32_t host_abi_version, sluice_plugin_v1* plugin) {
  if (host_abi_version != SLUICE_PLUGIN_ABI_VERSION) return 1;
  plugin->abi_version = SLUICE_PLUGIN_ABI_VERSION;
  plugin->plugin_name = "sluice-test-plugin";
  plugin->num_ops = sizeof(kOps) / sizeof(kOps[0]);
  plugin->ops = kOps;
  return 0;
}
