/* flashcpu_kernel_info_get: the registry's attention rows, for users and
 * tools that force a kernel by name. */
#include <string.h>

#include "api/errors.h"
#include "dispatch/isa.h"
#include "dispatch/kernel_table.h"
#include "kernels/registry.h"

void flashcpu_kernel_info_init(flashcpu_kernel_info *info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

int flashcpu_kernel_info_get(int index, flashcpu_kernel_info *info) {
  if (!info) return 0;
  /* The one layout so far; a later version writes an earlier struct's
   * fields only. */
  if (info->struct_size != sizeof(flashcpu_kernel_info)) {
    fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
            "flashcpu_kernel_info_get: info->struct_size is %zu, expected "
            "%zu (call flashcpu_kernel_info_init first)",
            info->struct_size, sizeof(flashcpu_kernel_info));
    return 0;
  }
  if (index < 0 || (size_t)index >= fc_attention_kernel_count) return 0;
  const fc_attention_kernel *k = &fc_attention_kernels[index];
  const fc_cpu_features *cpu = fc_cpu_features_get();
  info->name = k->name;
  info->family = fc_kernel_family_name(k->family);
  info->isa = k->isa;
  info->weights_dtype = k->weights;
  info->forced_only = k->status == FC_ROW_FORCED_ONLY;
  info->runnable =
      fc_isa_supported(cpu, k->isa) && fc_kernel_need_met(cpu, k->need);
  return 1;
}
