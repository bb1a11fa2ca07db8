// The compiled fast path of flashcpu.attention(..., out=...) on torch CPU
// tensors: reads the four tensors' geometry in C++ and calls
// flashcpu_attention, whose address the package passes in (so that this
// module links against torch only, not against a copy of libflashcpu).
// Built by flashcpu.native.build() with torch.utils.cpp_extension. It also
// serves torch.ops.flashcpu.attention on CPU (_native_op.h).
#include <ATen/EmptyTensor.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

namespace {

// flashcpu_tensor's layout (include/flashcpu/flashcpu.h).
struct Tensor {
  void *data;
  int32_t dtype;
  int64_t dims[4];
  int64_t strides[4];
};
static_assert(sizeof(Tensor) == 80, "flashcpu_tensor is 80 bytes on LP64");

using AttentionFn = int (*)(void *, const Tensor *, const Tensor *,
                            const Tensor *, const Tensor *, float *,
                            const void *);
using PagedFn = int (*)(void *, const void *, const Tensor *, const void *,
                        const Tensor *, float *, const void *);
using AppendFn = int (*)(void *, const Tensor *, const Tensor *,
                         const int64_t *, const void *);
AttentionFn attention_fn = nullptr;
PagedFn paged_fn = nullptr;
AppendFn append_fn = nullptr;

int dtype_code(at::ScalarType type) {
  switch (type) {
  case at::kFloat:
    return 0;
  case at::kHalf:
    return 1;
  case at::kBFloat16:
    return 2;
  default:
    return -1;
  }
}

// flashcpu's dtype code of a strided CPU tensor of dims dimensions whose
// last dimension is contiguous (or of size 1) and whose data is not null;
// -1 for anything else.
int float_rows_code(const at::Tensor &t, int64_t dims) {
  if (!t.defined() || t.dim() != dims || !t.device().is_cpu() ||
      t.layout() != at::kStrided)
    return -1;
  const int code = dtype_code(t.scalar_type());
  if (code < 0 || (t.size(dims - 1) > 1 && t.stride(dims - 1) != 1) ||
      !t.data_ptr())
    return -1;
  return code;
}

// A [B, seq, H, D] view of a 4-dim CPU tensor of a float dtype (axes 1 and
// 2 swapped for "bhsd"), its last dim contiguous; false for anything else.
bool view_of(const at::Tensor &t, bool bhsd, Tensor *v) {
  const int code = float_rows_code(t, 4);
  if (code < 0) return false;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  v->data = t.data_ptr();
  v->dtype = code;
  const int seq = bhsd ? 2 : 1, head = bhsd ? 1 : 2;
  v->dims[0] = sizes[0], v->dims[1] = sizes[seq], v->dims[2] = sizes[head];
  v->dims[3] = sizes[3];
  v->strides[0] = strides[0], v->strides[1] = strides[seq];
  v->strides[2] = strides[head], v->strides[3] = 1;
  return true;
}

// A [1, T, H, D] view of packed rows [T, H, D] (the paged calls').
bool rows_of(const at::Tensor &t, Tensor *v) {
  const int code = float_rows_code(t, 3);
  if (code < 0) return false;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  v->data = t.data_ptr();
  v->dtype = code;
  v->dims[0] = 1, v->strides[0] = 0;
  for (int i = 0; i < 3; i++) v->dims[i + 1] = sizes[i];
  v->strides[1] = strides[0], v->strides[2] = strides[1], v->strides[3] = 1;
  return true;
}

// The library functions' addresses, from the package's ctypes handles.
void set_functions(int64_t attention, int64_t paged, int64_t append) {
  attention_fn = reinterpret_cast<AttentionFn>(attention);
  paged_fn = reinterpret_cast<PagedFn>(paged);
  append_fn = reinterpret_cast<AppendFn>(append);
}

// flashcpu_attention's status, or -1 where the tensors are not for this
// path (the caller then takes the general one, which says what is wrong).
// out_bhsd: out's layout (the transformers backend writes [B, L, H, Dv]
// for [B, H, L, D] inputs).
int64_t attention_into(const at::Tensor &q, const at::Tensor &k,
                       const at::Tensor &v, const at::Tensor &out, bool bhsd,
                       bool out_bhsd, int64_t context, int64_t params) {
  Tensor views[4];
  if (!attention_fn || !view_of(q, bhsd, &views[0]) ||
      !view_of(k, bhsd, &views[1]) || !view_of(v, bhsd, &views[2]) ||
      !view_of(out, out_bhsd, &views[3]))
    return -1;
  pybind11::gil_scoped_release unlocked;
  return attention_fn(reinterpret_cast<void *>(context), &views[0], &views[1],
                      &views[2], &views[3], nullptr,
                      reinterpret_cast<const void *>(params));
}

// flashcpu_attention_paged's status on packed q and out, or -1.
int64_t attention_paged_into(const at::Tensor &q, const at::Tensor &out,
                             int64_t kv, int64_t plan, int64_t context,
                             int64_t params) {
  Tensor views[2];
  if (!paged_fn || !rows_of(q, &views[0]) || !rows_of(out, &views[1]))
    return -1;
  pybind11::gil_scoped_release unlocked;
  return paged_fn(reinterpret_cast<void *>(context),
                  reinterpret_cast<const void *>(plan), &views[0],
                  reinterpret_cast<const void *>(kv), &views[1], nullptr,
                  reinterpret_cast<const void *>(params));
}

// flashcpu_kv_append's status, or -1 (slot_mapping: int64 [T], contiguous).
int64_t kv_append_into(const at::Tensor &k_new, const at::Tensor &v_new,
                       const at::Tensor &slots, int64_t kv, int64_t context) {
  Tensor views[2];
  if (!append_fn || !rows_of(k_new, &views[0]) || !rows_of(v_new, &views[1]) ||
      !slots.defined() || slots.dim() != 1 || !slots.device().is_cpu() ||
      slots.scalar_type() != at::kLong ||
      (slots.numel() > 1 && slots.stride(0) != 1) ||
      slots.numel() != views[0].dims[1])
    return -1;
  static const int64_t none = 0;
  const int64_t *at = slots.numel() ? slots.data_ptr<int64_t>() : &none;
  pybind11::gil_scoped_release unlocked;
  return append_fn(reinterpret_cast<void *>(context), &views[0], &views[1], at,
                   reinterpret_cast<const void *>(kv));
}

#include "_native_package.h"

#include "_native_backend.h"

} // namespace

#include "_native_op.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_functions", &set_functions);
  m.def("attention_into", &attention_into);
  m.def("attention_new", &attention_new);
  m.def("set_backend", &set_backend);
  m.def("set_package", &set_package);
  m.def("bump_context_generation", &bump_context_generation);
  // A vectorcall, not a pybind11 function: no copies of its arguments.
  PyObject *forward = PyCFunction_NewEx(&backend_forward_def, nullptr,
                                        m.attr("__name__").ptr());
  if (!forward) throw pybind11::error_already_set();
  m.add_object("backend_forward",
               pybind11::reinterpret_steal<pybind11::object>(forward));
  m.def("set_backend_timing", &set_backend_timing);
  m.def("backend_times", &backend_times);
  m.def("backend_stage_times", &backend_stage_times);
  m.def("attention_paged_into", &attention_paged_into);
  m.def("kv_append_into", &kv_append_into);
  m.def("register_ops", &register_ops);
  m.def("deregister_ops", &deregister_ops);
  m.def("ops_registered", [] { return op_library != nullptr; });
}
