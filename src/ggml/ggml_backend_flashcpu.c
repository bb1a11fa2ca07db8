/* flashcpu as a ggml backend: a host-memory accelerator that takes
 * GGML_OP_FLASH_ATTN_EXT (where ggml_mapping.h says flashcpu computes it
 * exactly) and nothing else, so that ggml's scheduler leaves every other
 * op to the CPU backend. It uses the CPU backend's buffer type, so tensors
 * never move: the scheduler hands it the attention node of each layer,
 * with the KV cache, q and the mask where they are. Loaded with
 * ggml_backend_load (GGML_BACKEND_PATH=libggml-flashcpu.so for programs
 * that call ggml_backend_load_all, llama.cpp's among them). */
#include "ggml/ggml_backend_flashcpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCG_NAME "FLASHCPU"

static ggml_backend_reg_t fcg_reg(void);

/* ---------------------------------------------------------------- backend */

static const char *backend_get_name(ggml_backend_t backend) {
  (void)backend;
  return FCG_NAME;
}

static void backend_free(ggml_backend_t backend) {
  fcg_backend *b = backend->context;
  fcg_backend_release(b);
  free(b);
  free(backend);
}

static enum ggml_status backend_graph_compute(ggml_backend_t backend,
                                              struct ggml_cgraph *graph) {
  fcg_backend *b = backend->context;
  for (int i = 0; i < ggml_graph_n_nodes(graph); i++) {
    struct ggml_tensor *node = ggml_graph_node(graph, i);
    if (!(node->flags & GGML_TENSOR_FLAG_COMPUTE)) continue;
    switch (node->op) {
    case GGML_OP_FLASH_ATTN_EXT: {
      const enum ggml_status status = fcg_backend_flash_attn(b, node);
      if (status != GGML_STATUS_SUCCESS) return status;
      break;
    }
    case GGML_OP_NONE:
    case GGML_OP_RESHAPE:
    case GGML_OP_VIEW:
    case GGML_OP_PERMUTE:
    case GGML_OP_TRANSPOSE:
      break;
    default:
      fprintf(stderr, "flashcpu ggml backend: given %s, which it declines\n",
              ggml_op_desc(node));
      return GGML_STATUS_FAILED;
    }
  }
  return GGML_STATUS_SUCCESS;
}

static ggml_guid_t backend_guid(void) {
  static ggml_guid guid = {0x66, 0x6c, 0x61, 0x73, 0x68, 0x63, 0x70, 0x75,
                           0x2d, 0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x30, 0x31};
  return &guid;
}

/* ggml_backend_set_n_threads, found through the registry's
 * get_proc_address as ggml's other host backends' is. */
static void backend_set_n_threads(ggml_backend_t backend, int n_threads) {
  if (!backend || !ggml_guid_matches(backend->guid, backend_guid())) return;
  fcg_backend *b = backend->context;
  b->n_threads = n_threads > 0 ? n_threads : 0;
}

static ggml_backend_t backend_init(void) {
  fcg_backend *b = calloc(1, sizeof *b);
  ggml_backend_t backend = calloc(1, sizeof *backend);
  if (!b || !backend) {
    free(b);
    free(backend);
    return NULL;
  }
  b->launch = fcg_launch_from_environment();
  const char *profile = getenv("FLASHCPU_GGML_PROFILE");
  b->profile.on = profile && profile[0] == '1';
  backend->guid = backend_guid();
  backend->iface.get_name = backend_get_name;
  backend->iface.free = backend_free;
  backend->iface.graph_compute = backend_graph_compute;
  backend->device = ggml_backend_reg_dev_get(fcg_reg(), 0);
  backend->context = b;
  return backend;
}

/* ----------------------------------------------------------------- device */

static const char *device_get_name(ggml_backend_dev_t dev) {
  (void)dev;
  return FCG_NAME;
}

static const char *device_get_description(ggml_backend_dev_t dev) {
  (void)dev;
  static char description[96];
  if (!description[0])
    snprintf(description, sizeof description,
             "flashcpu %s flash attention (FLASH_ATTN_EXT only)",
             flashcpu_version_string());
  return description;
}

static void device_get_memory(ggml_backend_dev_t dev, size_t *free_bytes,
                              size_t *total_bytes) {
  (void)dev;
  *free_bytes = 0; /* host memory: nothing of its own to report */
  *total_bytes = 0;
}

static enum ggml_backend_dev_type device_get_type(ggml_backend_dev_t dev) {
  (void)dev;
  return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

static void device_get_props(ggml_backend_dev_t dev,
                             struct ggml_backend_dev_props *props) {
  memset(props, 0, sizeof *props);
  props->name = device_get_name(dev);
  props->description = device_get_description(dev);
  props->type = device_get_type(dev);
  device_get_memory(dev, &props->memory_free, &props->memory_total);
  props->caps.buffer_from_host_ptr = true;
}

static ggml_backend_t device_init_backend(ggml_backend_dev_t dev,
                                          const char *params) {
  (void)dev;
  (void)params;
  return backend_init();
}

static ggml_backend_buffer_type_t
device_get_buffer_type(ggml_backend_dev_t dev) {
  (void)dev;
  return ggml_backend_cpu_buffer_type();
}

static ggml_backend_buffer_t device_buffer_from_host_ptr(ggml_backend_dev_t dev,
                                                         void *ptr, size_t size,
                                                         size_t max_tensor) {
  (void)dev;
  (void)max_tensor;
  return ggml_backend_cpu_buffer_from_ptr(ptr, size);
}

static bool device_supports_op(ggml_backend_dev_t dev,
                               const struct ggml_tensor *op) {
  (void)dev;
  return fcg_backend_supports_op(op);
}

static bool device_supports_buft(ggml_backend_dev_t dev,
                                 ggml_backend_buffer_type_t buft) {
  (void)dev;
  return ggml_backend_buft_is_host(buft);
}

/* --------------------------------------------------------------- registry */

static const char *reg_get_name(ggml_backend_reg_t reg) {
  (void)reg;
  return FCG_NAME;
}

static size_t reg_get_device_count(ggml_backend_reg_t reg) {
  (void)reg;
  return 1;
}

static ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index);

static void *reg_get_proc_address(ggml_backend_reg_t reg, const char *name) {
  (void)reg;
  if (strcmp(name, "ggml_backend_set_n_threads") == 0)
    return (void *)backend_set_n_threads;
  return NULL;
}

static struct ggml_backend_reg fcg_registry = {
    .api_version = GGML_BACKEND_API_VERSION,
    .iface = {.get_name = reg_get_name,
              .get_device_count = reg_get_device_count,
              .get_device = reg_get_device,
              .get_proc_address = reg_get_proc_address}};

static struct ggml_backend_device fcg_device = {
    .iface = {.get_name = device_get_name,
              .get_description = device_get_description,
              .get_memory = device_get_memory,
              .get_type = device_get_type,
              .get_props = device_get_props,
              .init_backend = device_init_backend,
              .get_buffer_type = device_get_buffer_type,
              .buffer_from_host_ptr = device_buffer_from_host_ptr,
              .supports_op = device_supports_op,
              .supports_buft = device_supports_buft},
    .reg = &fcg_registry};

static ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index) {
  (void)reg;
  return index == 0 ? &fcg_device : NULL;
}

static ggml_backend_reg_t fcg_reg(void) { return &fcg_registry; }

/* The entry point ggml_backend_load looks up (GGML_BACKEND_DL_IMPL). */
GGML_BACKEND_API ggml_backend_reg_t ggml_backend_init(void);
ggml_backend_reg_t ggml_backend_init(void) { return fcg_reg(); }
