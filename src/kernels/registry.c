/* The registry's rows as arrays, and the predicates they name. */
#include "kernels/registry.h"

#include <stdio.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"

const fc_attention_kernel fc_attention_kernels[] = {
#define FC_ATTENTION_KERNEL(symbol, family, isa, cpu_need, status, takes,      \
                            wanted, weights, tile_slots)                       \
  {#symbol, symbol, family, isa,     cpu_need,                                 \
   status,  takes,  wanted, weights, tile_slots},
#include "kernels/kernels.inc"
};
const size_t fc_attention_kernel_count =
    sizeof fc_attention_kernels / sizeof fc_attention_kernels[0];

const fc_merge_kernel fc_merge_kernels[] = {
#define FC_MERGE_KERNEL(symbol, isa) {#symbol, symbol, isa},
#include "kernels/kernels.inc"
};
const size_t fc_merge_kernel_count =
    sizeof fc_merge_kernels / sizeof fc_merge_kernels[0];

const fc_dequant_kernel fc_dequant_kernels[] = {
#define FC_DEQUANT_KERNEL(symbol, isa) {#symbol, symbol, isa},
#include "kernels/kernels.inc"
};
const size_t fc_dequant_kernel_count =
    sizeof fc_dequant_kernels / sizeof fc_dequant_kernels[0];

const fc_row_converter fc_row_converters[] = {
#define FC_ROW_CONVERTER(symbol, isa, dtype) {#symbol, symbol, isa, dtype},
#include "kernels/kernels.inc"
};
const size_t fc_row_converter_count =
    sizeof fc_row_converters / sizeof fc_row_converters[0];

const fc_attention_kernel *fc_attention_kernel_find(const char *name) {
  for (size_t i = 0; name && i < fc_attention_kernel_count; i++)
    if (strcmp(fc_attention_kernels[i].name, name) == 0)
      return &fc_attention_kernels[i];
  return NULL;
}

const char *fc_kernel_family_name(fc_kernel_family family) {
  return family == FC_FAMILY_SPLITKV ? "split-KV decode" : "prefill";
}

int64_t fc_kernel_tile_slots(const fc_attention_kernel *kernel,
                             const fc_kernel_settings *s) {
  return s->prefill_tile_slots > 0 ? s->prefill_tile_slots : kernel->tile_slots;
}

bool fc_kernel_takes(const fc_attention_kernel *kernel, const fc_problem *p,
                     char *why, size_t size) {
  if (size) why[0] = '\0';
  return !kernel->takes || kernel->takes(p, why, size);
}

static bool is_bf16_qk(const fc_problem *p) {
  return p->q.dtype == FLASHCPU_DTYPE_BF16 && p->k.dtype == FLASHCPU_DTYPE_BF16;
}

bool fc_takes_splitkv(const fc_problem *p, char *why, size_t size) {
  if (p->q_len <= FC_SPLITKV_MAX_ROWS) return true;
  snprintf(why, size, "%lld rows > %d", (long long)p->q_len,
           FC_SPLITKV_MAX_ROWS);
  return false;
}

bool fc_takes_splitkv_bf16_dot(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size)) return false;
  if (is_bf16_qk(p)) return true;
  snprintf(why, size, "q and k are not both bf16");
  return false;
}

bool fc_takes_splitkv_fp8_dot(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size)) return false;
  const fc_view *k = &p->k;
  if (p->q.dtype != FLASHCPU_DTYPE_BF16 ||
      (k->dtype != FLASHCPU_DTYPE_F8_E4M3 &&
       k->dtype != FLASHCPU_DTYPE_F8_E5M2)) {
    snprintf(why, size, "q is not bf16 or k is not f8_e4m3 or f8_e5m2");
    return false;
  }
  if (k->scale_strides[3] != 0 && k->scales) {
    snprintf(why, size, "k's scales vary along the row");
    return false;
  }
  return true;
}

/* An F8 view whose row scales do not vary along the row. */
static bool is_f8_by_row(const fc_view *view) {
  return (view->dtype == FLASHCPU_DTYPE_F8_E4M3 ||
          view->dtype == FLASHCPU_DTYPE_F8_E5M2) &&
         (view->scale_strides[3] == 0 || !view->scales);
}

bool fc_takes_splitkv_f8(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size)) return false;
  if (is_f8_by_row(&p->k) || is_f8_by_row(&p->v)) return true;
  snprintf(why, size,
           "neither k nor v is f8_e4m3 or f8_e5m2 with one scale per row");
  return false;
}

bool fc_takes_splitkv_int_dot(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size)) return false;
  const fc_view *k = &p->k;
  if (k->dtype != FLASHCPU_DTYPE_I8 && k->dtype != FLASHCPU_DTYPE_U8) {
    snprintf(why, size, "k is not i8 or u8");
    return false;
  }
  if (k->scale_strides[3] != 0 && (k->scales || k->zeros)) {
    snprintf(why, size, "k's scales vary along the row");
    return false;
  }
  if (p->head_dim > 256) {
    snprintf(why, size, "head_dim %lld > 256", (long long)p->head_dim);
    return false;
  }
  return true;
}

bool fc_takes_splitkv_amx_int8(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv_int_dot(p, why, size)) return false;
  const fc_view *v = &p->v;
  if (v->dtype != p->k.dtype) {
    snprintf(why, size, "v's dtype is not k's");
    return false;
  }
  if (v->scale_strides[3] != 0 && (v->scales || v->zeros)) {
    snprintf(why, size, "v's scales vary along the row");
    return false;
  }
  if ((p->head_dim != 64 && p->head_dim != 128) ||
      p->v_head_dim != p->head_dim) {
    snprintf(why, size, "head dims %lld/%lld are not both 64 or 128",
             (long long)p->head_dim, (long long)p->v_head_dim);
    return false;
  }
  return true;
}

static bool is_bf16_qkv(const fc_problem *p, char *why, size_t size) {
  if (is_bf16_qk(p) && p->v.dtype == FLASHCPU_DTYPE_BF16) return true;
  snprintf(why, size, "q, k and v are not all bf16");
  return false;
}

/* The AMX-BF16 decode kernels' head dims: one multiple of 32 up to 128. */
static bool amx_bf16_head_dims(const fc_problem *p, char *why, size_t size) {
  if (p->head_dim % 32 == 0 && p->head_dim <= 128 &&
      p->v_head_dim == p->head_dim)
    return true;
  snprintf(why, size,
           "head dims %lld/%lld are not one multiple of 32 up to 128",
           (long long)p->head_dim, (long long)p->v_head_dim);
  return false;
}

bool fc_takes_splitkv_amx_bf16(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size) || !is_bf16_qkv(p, why, size))
    return false;
  return amx_bf16_head_dims(p, why, size);
}

bool fc_takes_splitkv_amx_f8(const fc_problem *p, char *why, size_t size) {
  if (!fc_takes_splitkv(p, why, size)) return false;
  if (p->q.dtype != FLASHCPU_DTYPE_BF16 || !is_f8_by_row(&p->k) ||
      !is_f8_by_row(&p->v)) {
    snprintf(why, size,
             "q is not bf16, or k or v is not f8_e4m3 or f8_e5m2 with one "
             "scale per row");
    return false;
  }
  return amx_bf16_head_dims(p, why, size);
}

bool fc_takes_prefill_amx(const fc_problem *p, char *why, size_t size) {
  return is_bf16_qkv(p, why, size);
}

bool fc_wants_prefill_amx(const fc_problem *p, const fc_kernel_settings *s,
                          char *why, size_t size) {
  (void)p;
  if (s->prefill_amx) return true;
  snprintf(why, size, "prefill_amx is off");
  return false;
}

bool fc_takes_prefill_bf16_dot(const fc_problem *p, char *why, size_t size) {
  if (!is_bf16_qkv(p, why, size)) return false;
  if (p->head_dim % 2 == 0) return true;
  snprintf(why, size, "head_dim %lld is odd", (long long)p->head_dim);
  return false;
}

bool fc_wants_splitkv(const fc_problem *p, const fc_kernel_settings *s,
                      char *why, size_t size) {
  if (p->q_len <= s->splitkv_max_rows) return true;
  snprintf(why, size, "%lld rows > splitkv_max_rows %lld", (long long)p->q_len,
           (long long)s->splitkv_max_rows);
  return false;
}

bool fc_wants_splitkv_bf16_dot(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size) {
  if (!s->decode_bf16_dot) {
    snprintf(why, size, "decode_bf16_dot is off");
    return false;
  }
  return fc_wants_splitkv(p, s, why, size);
}

bool fc_wants_splitkv_amx_bf16(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size) {
  if (p->q_len * p->group < 2 * FC_SPLITKV_CHUNK) {
    snprintf(why, size,
             "%lld rows x %lld heads per kv head < %d (one chunk: the vector "
             "kernel is as fast)",
             (long long)p->q_len, (long long)p->group, 2 * FC_SPLITKV_CHUNK);
    return false;
  }
  return fc_wants_splitkv(p, s, why, size);
}

bool fc_wants_prefill_bf16_dot(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size) {
  (void)p;
  if (s->prefill_bf16_dot) return true;
  snprintf(why, size, "prefill_bf16_dot is off");
  return false;
}
