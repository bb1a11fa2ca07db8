#include "dispatch/kernel_table.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int fc_kernel_need_met(const fc_cpu_features *cpu, fc_cpu_need need) {
  switch (need) {
  case FC_NEED_NONE:
    return 1;
  case FC_NEED_AVX512_BF16:
    return cpu->avx512_bf16;
  case FC_NEED_AVX512_VNNI:
    return cpu->avx512_vnni;
  case FC_NEED_AMX_BF16:
    return cpu->amx_bf16 && cpu->amx_permitted && cpu->avx512_bf16;
  case FC_NEED_AMX_INT8:
    return cpu->amx_int8 && cpu->amx_permitted && cpu->avx512_vnni;
  case FC_NEED_AMX_BF16_VBMI:
    return cpu->amx_bf16 && cpu->amx_permitted && cpu->avx512_bf16 &&
           cpu->avx512_vbmi;
  }
  return 0;
}

/* Whether a helper row (converter, dequantizer, merge) of row_isa fills a
 * slot of a table for isa: the ISA's own row always, a portable one only
 * while the slot is empty. */
static bool helper_fills(flashcpu_isa row_isa, flashcpu_isa isa, bool filled) {
  if (row_isa == isa) return true;
  return row_isa == FLASHCPU_ISA_SCALAR && !filled;
}

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa,
                          const fc_cpu_features *cpu,
                          const fc_settings *settings) {
  memset(table, 0, sizeof *table);
  table->isa = isa;
  table->settings = settings->kernel;
  /* Row converters: the ISA's, else the portable ones. */
  for (size_t i = 0; i < fc_row_converter_count; i++) {
    const fc_row_converter *c = &fc_row_converters[i];
    if (!helper_fills(c->isa, isa, table->row_to_f32[c->dtype] != NULL))
      continue;
    table->row_to_f32[c->dtype] = c->run;
    table->row_to_f32_names[c->dtype] = c->name;
  }
  for (size_t i = 0; i < fc_dequant_kernel_count; i++) {
    const fc_dequant_kernel *d = &fc_dequant_kernels[i];
    if (!helper_fills(d->isa, isa, table->dequant_row != NULL)) continue;
    table->dequant_row = d->run;
    table->dequant_row_name = d->name;
  }
  for (size_t i = 0; i < fc_merge_kernel_count; i++) {
    const fc_merge_kernel *m = &fc_merge_kernels[i];
    if (!helper_fills(m->isa, isa, table->merge != NULL)) continue;
    table->merge = m->run;
    table->merge_name = m->name;
  }
  for (size_t i = 0; i < fc_attention_kernel_count; i++) {
    const fc_attention_kernel *k = &fc_attention_kernels[i];
    if (k->isa != isa || !fc_kernel_need_met(cpu, k->need) ||
        table->candidate_count == FC_MAX_CANDIDATES)
      continue;
    table->candidates[table->candidate_count++] = k;
  }
  table->forced = settings->forced_kernel[0]
                      ? fc_attention_kernel_find(settings->forced_kernel)
                      : NULL;
}

const fc_attention_kernel *fc_kernel_table_choose(const fc_kernel_table *table,
                                                  const fc_problem *p,
                                                  char *reason,
                                                  size_t reason_size) {
  char why[128];
  if (table->forced) {
    if (!fc_kernel_takes(table->forced, p, why, sizeof why)) {
      snprintf(reason, reason_size, "the forced kernel %s cannot take it: %s",
               table->forced->name, why);
      return NULL;
    }
    if (reason_size)
      snprintf(reason, reason_size, "forced by the kernel setting");
    return table->forced;
  }
  /* The reasons the rows before the chosen one passed, for the log. */
  char passed[256] = "";
  for (size_t i = 0; i < table->candidate_count; i++) {
    const fc_attention_kernel *k = table->candidates[i];
    if (k->status == FC_ROW_FORCED_ONLY) continue;
    const size_t why_size = reason_size ? sizeof why : 0;
    bool ok = fc_kernel_takes(k, p, why, why_size) &&
              (!k->wanted || k->wanted(p, &table->settings, why, why_size));
    if (ok) {
      if (reason_size)
        snprintf(reason, reason_size, "%lld rows, %s%s%s", (long long)p->q_len,
                 fc_kernel_family_name(k->family),
                 *passed ? "; passed over: " : "", passed);
      return k;
    }
    if (!reason_size) continue; /* no log: nothing to format */
    size_t used = strlen(passed);
    snprintf(passed + used, sizeof passed - used, "%s%s (%s)", used ? ", " : "",
             k->name, why);
  }
  /* Every table ends in a prefill row that takes every problem. */
  snprintf(reason, reason_size, "no kernel takes it: %s", passed);
  return NULL;
}
