// torch.ops.flashcpu.attention's and kv_append's CPU kernels in C++, so that
// the dispatcher calls the library with no Python frame in between. Included
// once, by _native_attention.cpp (it uses that file's views and function
// pointers).
//
// The package defines the operator (schema and fake kernel, torch_ops.py)
// and then calls register_ops, which registers these kernels at run time,
// after the schemas exist, and deregister_ops takes them back (the Python
// kernels then serve again). The common call runs here; anything else
// (ALiBi slopes, sinks not a float vector [Hq], quantized codes, other dtypes,
// a status other than 0, a bad argument) goes to the Python kernel, which takes
// it or raises the flashcpu.Error that it raises without the extension: the
// same results and the same messages on both paths.

namespace {

// What the kernels need from the package beyond set_package's
// (_native_package.h), given by register_ops.
struct OpState {
  PyObject *python_attention; // the Python kernels, for everything else
  PyObject *python_kv_append;
  PyObject *python_paged;
  PyObject *plan_handles; // (plan id, dtypes) -> (plan, C plan, context)
};
OpState op_state;
std::unique_ptr<torch::Library> op_library;

constexpr size_t kAttentionArgs = 11; // the schemas' arguments
constexpr size_t kAppendArgs = 6;
constexpr size_t kPagedArgs = 12;

// flashcpu_paged_kv's layout (include/flashcpu/flashcpu.h).
struct PagedKV {
  size_t struct_size;
  void *k, *v;
  int32_t k_dtype, v_dtype;
  int64_t num_pages, page_size, kv_heads, head_dim, v_head_dim;
  int64_t k_strides[3], v_strides[3];
  const void *k_scales, *v_scales;
};
static_assert(sizeof(PagedKV) == 136, "flashcpu_paged_kv is 136 bytes on LP64");

// The params of a call with these options (no arrays), or false. options:
// causal, window_left, window_right, softcap and scale, in that order.
bool params_of(const c10::IValue *options, unsigned char *params) {
  return plain_params(
      options[0].toBool(), options[1].toInt(), options[2].toInt(),
      options[3].toDouble(), !options[4].isNone(),
      options[4].isNone() ? 0.0 : options[4].toDouble(), params);
}

// call(context)'s status on this thread's default context, without the
// GIL; -1 where there is no context to take.
template <typename Call> int with_default_context(Call call) {
  void *context = default_context();
  if (!context) return -1;
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release unlocked;
    return call(context);
  }
  return call(context);
}

// Sinks [heads] of a float dtype, contiguous, into params, as the
// Python kernel passes them in place; false for anything else.
bool sinks_of(const at::Tensor &sinks, int64_t heads, unsigned char *params) {
  if (!sinks.device().is_cpu() || sinks.layout() != at::kStrided ||
      sinks.dim() != 1 || sinks.size(0) != heads ||
      (heads > 1 && sinks.stride(0) != 1) || !sinks.data_ptr())
    return false;
  const int code = dtype_code(sinks.scalar_type());
  if (code < 0) return false;
  put(params, package.sinks_at, sinks.data_ptr());
  put(params, package.sinks_dtype_at, static_cast<int32_t>(code));
  return true;
}

// The common call: the new output, or an undefined tensor where the call
// is anything else or the library refused it.
at::Tensor attention_common(const c10::IValue *args) {
  if (!attention_fn || !args[10].isNone() || !args[8].isString() ||
      !(args[9].isNone() || args[9].isTensor()))
    return {};
  const std::string &layout = args[8].toStringRef();
  const bool bhsd = layout == "bhsd";
  if (!bhsd && layout != "bshd") return {};
  alignas(16) unsigned char params[kParamsBytes];
  if (!params_of(args + 3, params)) return {};
  const at::Tensor &q = args[0].toTensor(), &k = args[1].toTensor(),
                   &v = args[2].toTensor();
  Tensor views[4];
  if (!view_of(q, bhsd, &views[0]) || !view_of(k, bhsd, &views[1]) ||
      !view_of(v, bhsd, &views[2]))
    return {};
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)},
                             at::TensorOptions().dtype(q.scalar_type()));
  if (!view_of(out, bhsd, &views[3]) ||
      (args[9].isTensor() &&
       !sinks_of(args[9].toTensor(), views[0].dims[2], params)))
    return {};
  const int status = with_default_context([&](void *context) {
    return attention_fn(context, &views[0], &views[1], &views[2], &views[3],
                        nullptr, params);
  });
  return status == 0 ? out : at::Tensor();
}

// One side of a PagedKV of an unquantized torch cache, as the package's
// PagedKV sets it: dims [num_pages, page_size, Hkv, D]; false for anything
// else (the Python kernel then takes it).
bool cache_side(const at::Tensor &cache, bool hnd, void **data, int32_t *dtype,
                int64_t strides[3], int64_t dims[4]) {
  const int code = float_rows_code(cache, 4);
  if (code < 0) return false;
  const auto sizes = cache.sizes();
  const auto given = cache.strides();
  const int order[4] = {0, hnd ? 2 : 1, hnd ? 1 : 2, 3};
  for (int i = 0; i < 4; i++) {
    if (given[i] < 0) return false;
    dims[i] = sizes[order[i]];
    if (i < 3) strides[i] = given[order[i]];
  }
  *data = cache.data_ptr();
  *dtype = code;
  return true;
}

// The PagedKV of two unquantized torch caches and a layout, or false.
bool paged_kv_of(const c10::IValue &k_cache, const c10::IValue &v_cache,
                 const c10::IValue &layout_name, PagedKV *kv) {
  if (!layout_name.isString()) return false;
  const std::string &layout = layout_name.toStringRef();
  const bool hnd = layout == "hnd";
  if (!hnd && layout != "nhd") return false;
  *kv = PagedKV{};
  kv->struct_size = sizeof *kv;
  int64_t k_dims[4], v_dims[4];
  if (!cache_side(k_cache.toTensor(), hnd, &kv->k, &kv->k_dtype, kv->k_strides,
                  k_dims) ||
      !cache_side(v_cache.toTensor(), hnd, &kv->v, &kv->v_dtype, kv->v_strides,
                  v_dims) ||
      k_dims[0] != v_dims[0] || k_dims[1] != v_dims[1] ||
      k_dims[2] != v_dims[2])
    return false;
  kv->num_pages = k_dims[0], kv->page_size = k_dims[1];
  kv->kv_heads = k_dims[2], kv->head_dim = k_dims[3];
  kv->v_head_dim = v_dims[3];
  return true;
}

// attention_paged's common call: the new output, or an undefined tensor.
// The step's plan comes from the package (it is a Python object, held
// while the call runs); one it has not yet made for these dtypes is made
// by the Python kernel, which the call then goes to.
at::Tensor paged_common(const c10::IValue *args) {
  alignas(16) unsigned char params[kParamsBytes];
  PagedKV kv;
  Tensor views[2];
  if (!paged_fn || !args[11].isNone() ||
      !(args[10].isNone() || args[10].isTensor()) ||
      !params_of(args + 5, params) ||
      !paged_kv_of(args[1], args[2], args[4], &kv) ||
      !rows_of(args[0].toTensor(), &views[0]))
    return {};
  const at::Tensor &q = args[0].toTensor(), &plan = args[3].toTensor();
  if (!plan.device().is_cpu() || plan.dim() != 1 || plan.numel() != 1 ||
      plan.scalar_type() != at::kLong)
    return {};
  at::Tensor out = at::empty({q.size(0), q.size(1), kv.v_head_dim},
                             at::TensorOptions().dtype(q.scalar_type()));
  if (!rows_of(out, &views[1]) ||
      (args[10].isTensor() &&
       !sinks_of(args[10].toTensor(), views[0].dims[2], params)))
    return {};
  pybind11::gil_scoped_acquire locked;
  const int code = views[0].dtype;
  pybind11::object found =
      pybind11::reinterpret_borrow<pybind11::object>(op_state.plan_handles)(
          *plan.data_ptr<int64_t>(), code, code, kv.k_dtype, kv.v_dtype);
  if (found.is_none()) return {};
  const pybind11::tuple held = found;
  void *c_plan = PyLong_AsVoidPtr(held[1].ptr());
  void *context = PyLong_AsVoidPtr(held[2].ptr());
  if (PyErr_Occurred()) throw pybind11::error_already_set();
  int status;
  {
    pybind11::gil_scoped_release unlocked;
    status =
        paged_fn(context, c_plan, &views[0], &kv, &views[1], nullptr, params);
  }
  return status == 0 ? out : at::Tensor();
}

// kv_append's common call: true when the library wrote the rows.
bool kv_append_common(const c10::IValue *args) {
  PagedKV kv;
  if (!append_fn || !paged_kv_of(args[3], args[4], args[5], &kv)) return false;
  const at::Tensor &slots = args[2].toTensor();
  Tensor rows[2];
  if (!rows_of(args[0].toTensor(), &rows[0]) ||
      !rows_of(args[1].toTensor(), &rows[1]) || !slots.defined() ||
      slots.dim() != 1 || !slots.device().is_cpu() ||
      slots.scalar_type() != at::kLong ||
      (slots.numel() > 1 && slots.stride(0) != 1) ||
      slots.numel() != rows[0].dims[1])
    return false;
  static const int64_t none = 0;
  const int64_t *at = slots.numel() ? slots.data_ptr<int64_t>() : &none;
  return with_default_context([&](void *context) {
           return append_fn(context, &rows[0], &rows[1], at, &kv);
         }) == 0;
}

pybind11::object python_of(const c10::IValue &value) {
  if (value.isNone()) return pybind11::none();
  if (value.isTensor()) return pybind11::cast(value.toTensor());
  if (value.isBool()) return pybind11::bool_(value.toBool());
  if (value.isInt()) return pybind11::int_(value.toInt());
  if (value.isDouble()) return pybind11::float_(value.toDouble());
  return pybind11::str(value.toStringRef());
}

// A Python kernel on the same arguments: its result, or its exception.
pybind11::object in_python(PyObject *kernel, const c10::IValue *args,
                           size_t count) {
  pybind11::tuple given(count);
  for (size_t i = 0; i < count; i++) given[i] = python_of(args[i]);
  return pybind11::reinterpret_borrow<pybind11::object>(kernel)(*given);
}

void attention_op(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  const c10::IValue *args = stack->data() + stack->size() - kAttentionArgs;
  at::Tensor out = attention_common(args);
  if (!out.defined()) {
    pybind11::gil_scoped_acquire locked;
    out = in_python(op_state.python_attention, args, kAttentionArgs)
              .cast<at::Tensor>();
  }
  stack->erase(stack->end() - kAttentionArgs, stack->end());
  stack->emplace_back(std::move(out));
}

void paged_op(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  const c10::IValue *args = stack->data() + stack->size() - kPagedArgs;
  at::Tensor out = paged_common(args);
  if (!out.defined()) {
    pybind11::gil_scoped_acquire locked;
    out = in_python(op_state.python_paged, args, kPagedArgs).cast<at::Tensor>();
  }
  stack->erase(stack->end() - kPagedArgs, stack->end());
  stack->emplace_back(std::move(out));
}

void kv_append_op(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  const c10::IValue *args = stack->data() + stack->size() - kAppendArgs;
  if (!kv_append_common(args)) {
    pybind11::gil_scoped_acquire locked;
    in_python(op_state.python_kv_append, args, kAppendArgs);
  }
  stack->erase(stack->end() - kAppendArgs, stack->end());
}

// Registers attention_op, paged_op and kv_append_op as the CPU kernels of
// flashcpu::attention, attention_paged and kv_append (the schemas defined
// already; the layout and context lookup given by set_package).
// paged_kv_size: the package's size of flashcpu_paged_kv.
void register_ops(int64_t paged_kv_size, pybind11::object python_attention,
                  pybind11::object python_kv_append,
                  pybind11::object python_paged,
                  pybind11::object plan_handles) {
  if (paged_kv_size != static_cast<int64_t>(sizeof(PagedKV)))
    throw std::invalid_argument(
        "register_ops: flashcpu_paged_kv's size differs");
  if (!package.size)
    throw std::invalid_argument("register_ops: set_package was not called");
  OpState state;
  // Kept for the life of the process: a kernel may run on any thread.
  state.python_attention = python_attention.release().ptr();
  state.python_kv_append = python_kv_append.release().ptr();
  state.python_paged = python_paged.release().ptr();
  state.plan_handles = plan_handles.release().ptr();
  op_library.reset();
  op_state = state;
  op_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "flashcpu", c10::DispatchKey::CPU, __FILE__,
      __LINE__);
  op_library->impl("attention",
                   torch::CppFunction::makeFromBoxedFunction<&attention_op>());
  op_library->impl("attention_paged",
                   torch::CppFunction::makeFromBoxedFunction<&paged_op>());
  op_library->impl("kv_append",
                   torch::CppFunction::makeFromBoxedFunction<&kv_append_op>());
}

void deregister_ops() { op_library.reset(); }

} // namespace
