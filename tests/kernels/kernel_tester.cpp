#include "kernel_tester.h"

#include <map>
#include <memory>
#include <tuple>

extern "C" {
#include "dispatch/cpu_features.h"
}

namespace fctest {

std::vector<Kernel> AllKernels() {
  std::vector<Kernel> kernels;
  for (size_t i = 0; i < fc_attention_kernel_count; i++)
    kernels.push_back(&fc_attention_kernels[i]);
  return kernels;
}

std::vector<Kernel> KernelsOfFamily(fc_kernel_family family) {
  std::vector<Kernel> kernels;
  for (Kernel kernel : AllKernels())
    if (kernel->family == family) kernels.push_back(kernel);
  return kernels;
}

bool KernelRunsHere(Kernel kernel, std::string *why) {
  if (!flashcpu_isa_supported(kernel->isa)) {
    *why = std::string("this CPU (or its OS) lacks ") +
           flashcpu_isa_name(kernel->isa);
    return false;
  }
  const fc_cpu_features *cpu = fc_cpu_features_get();
  switch (kernel->need) {
  case FC_NEED_NONE:
    return true;
  case FC_NEED_AVX512_BF16:
    if (cpu->avx512_bf16) return true;
    *why = "this CPU (or its OS) lacks AVX512-BF16";
    return false;
  case FC_NEED_AVX512_VNNI:
    if (cpu->avx512_vnni) return true;
    *why = "this CPU (or its OS) lacks AVX512-VNNI";
    return false;
  case FC_NEED_AMX_BF16:
    if (cpu->amx_bf16 && cpu->amx_permitted && cpu->avx512_bf16) return true;
    *why = cpu->amx_bf16 ? "the OS did not grant this process AMX tile data"
                         : "this CPU (or its OS) lacks AMX-BF16";
    return false;
  case FC_NEED_AMX_INT8:
    if (cpu->amx_int8 && cpu->amx_permitted && cpu->avx512_vnni) return true;
    *why = cpu->amx_int8 ? "the OS did not grant this process AMX tile data"
                         : "this CPU (or its OS) lacks AMX-INT8";
    return false;
  case FC_NEED_AMX_BF16_VBMI:
    if (cpu->amx_bf16 && cpu->amx_permitted && cpu->avx512_bf16 &&
        cpu->avx512_vbmi)
      return true;
    *why = !cpu->amx_bf16 ? "this CPU (or its OS) lacks AMX-BF16"
           : !cpu->avx512_vbmi
               ? "this CPU (or its OS) lacks AVX512-VBMI"
               : "the OS did not grant this process AMX tile data";
    return false;
  }
  *why = "a CPU need the tester does not know (" +
         std::to_string(kernel->need) + "): teach KernelRunsHere";
  ADD_FAILURE() << *why;
  return false;
}

bool KernelTakes(Kernel kernel, const AttentionCase &c, std::string *why) {
  const AttentionCase::Shape s = c.shape();
  // What the predicates read: the shape, the dtypes and the options' kinds.
  // Data pointers and strides are not part of a takes() decision.
  fc_problem p{};
  p.batch = s.batch;
  p.q_len = s.q_len;
  p.kv_capacity = s.kv_len;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.group = s.kv_heads > 0 ? s.q_heads / s.kv_heads : 0;
  p.head_dim = s.head_dim;
  p.v_head_dim = s.v_head_dim;
  p.q.dtype = s.q;
  p.k.dtype = s.k;
  p.v.dtype = s.v;
  p.out.dtype = s.out;
  p.causal = s.causal;
  p.window_left = p.window_right = -1;
  char reason[256] = "";
  const bool takes = fc_kernel_takes(kernel, &p, reason, sizeof reason);
  if (why) *why = reason;
  return takes;
}

flashcpu_context_options KernelContextOptions(Kernel kernel, int threads) {
  return KernelOptions(FLASHCPU_ISA_AUTO, kernel->name, threads);
}

flashcpu_context *KernelContext(Kernel kernel, int threads,
                                flashcpu_team_level team) {
  static std::map<std::tuple<Kernel, int, int>, std::unique_ptr<Context>>
      contexts;
  std::unique_ptr<Context> &slot =
      contexts[{kernel, threads, static_cast<int>(team)}];
  if (!slot) {
    flashcpu_context_options options = KernelContextOptions(kernel, threads);
    options.team_level = team;
    auto context = std::make_unique<Context>();
    const flashcpu_status status = context->Create(options);
    if (status != FLASHCPU_OK) {
      ADD_FAILURE() << "context forcing " << kernel->name << ": "
                    << flashcpu_status_name(status) << ": "
                    << flashcpu_last_error(nullptr);
      return nullptr;
    }
    slot = std::move(context);
  }
  return slot->get();
}

} // namespace fctest
