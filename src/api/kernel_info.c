/* flashcpu_kernel_info_get: the registry's attention rows, for users and
 * tools that force a kernel by name. */
#include "dispatch/isa.h"
#include "dispatch/kernel_table.h"
#include "kernels/registry.h"

int flashcpu_kernel_info_get(int index, flashcpu_kernel_info *info) {
  if (!info || index < 0 || (size_t)index >= fc_attention_kernel_count)
    return 0;
  const fc_attention_kernel *k = &fc_attention_kernels[index];
  const fc_cpu_features *cpu = fc_cpu_features_get();
  info->name = k->name;
  info->family = fc_kernel_family_name(k->family);
  info->isa = k->isa;
  info->weights_dtype = k->weights;
  info->runnable =
      fc_isa_supported(cpu, k->isa) && fc_kernel_need_met(cpu, k->need);
  return 1;
}
