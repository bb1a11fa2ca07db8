// The compiled fast path of flashcpu.attention(..., out=...) on torch CPU
// tensors: reads the four tensors' geometry in C++ and calls
// flashcpu_attention, whose address the package passes in (so that this
// module links against torch only, not against a copy of libflashcpu).
// Built by flashcpu.native.build() with torch.utils.cpp_extension.
#include <torch/extension.h>

#include <cstdint>

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
AttentionFn attention_fn = nullptr;

int dtype_code(at::ScalarType type) {
  switch (type) {
  case at::kFloat: return 0;
  case at::kHalf: return 1;
  case at::kBFloat16: return 2;
  default: return -1;
  }
}

// A [B, seq, H, D] view of a 4-dim CPU tensor of a float dtype (axes 1 and
// 2 swapped for "bhsd"), its last dim contiguous; false for anything else.
bool view_of(const at::Tensor &t, bool bhsd, Tensor *v) {
  if (!t.defined() || t.dim() != 4 || !t.device().is_cpu() ||
      t.layout() != at::kStrided)
    return false;
  const int code = dtype_code(t.scalar_type());
  if (code < 0) return false;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  if (strides[3] != 1 && sizes[3] > 1) return false;
  v->data = t.data_ptr();
  if (!v->data) return false;
  v->dtype = code;
  const int seq = bhsd ? 2 : 1, head = bhsd ? 1 : 2;
  v->dims[0] = sizes[0], v->dims[1] = sizes[seq], v->dims[2] = sizes[head];
  v->dims[3] = sizes[3];
  v->strides[0] = strides[0], v->strides[1] = strides[seq];
  v->strides[2] = strides[head], v->strides[3] = 1;
  return true;
}

void set_attention(int64_t address) {
  attention_fn = reinterpret_cast<AttentionFn>(address);
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

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_attention", &set_attention);
  m.def("attention_into", &attention_into);
}
