// torch.ops.flashcpu.attention's CPU kernel in C++, so that the dispatcher
// calls the library with no Python frame in between. Included once, by
// _native_attention.cpp (it uses that file's views and function pointers).
//
// The package defines the operator (schema and fake kernel, torch_ops.py)
// and then calls register_ops, which registers this kernel at run time,
// after the schema exists, and deregister_ops takes it back (the Python
// kernel then serves again). The common call runs here; anything else
// (sinks, ALiBi slopes, quantized codes, a status other than 0, a bad
// argument) goes to the Python kernel, which takes it or raises the
// flashcpu.Error that it raises without the extension: the same results
// and the same messages on both paths.

namespace {

// What the kernel needs from the package, given by register_ops.
struct OpState {
  std::vector<unsigned char> defaults; // AttentionParams, library defaults
  size_t scale_at, flags_at, left_at, right_at, softcap_at;
  uint32_t causal_flag;
  PyObject *context_address; // () -> the thread's default context handle
  PyObject *python_kernel;   // the Python kernel, for everything else
};
OpState op_state;
std::unique_ptr<torch::Library> op_library;

constexpr size_t kAttentionArgs = 11; // the schema's arguments

template <typename T> void put(unsigned char *params, size_t at, T value) {
  std::memcpy(params + at, &value, sizeof value);
}

// value as the float32 the Python kernel would store, or false where it
// would refuse it or the library would (a non-zero value that rounds to 0,
// inf, NaN): the Python kernel then says so.
bool float32_of(double value, float *out) {
  const float f = static_cast<float>(value);
  if (!(value == value) || value > 3.4028234663852886e38 ||
      value < -3.4028234663852886e38 || (value != 0.0 && f == 0.0f))
    return false;
  *out = f;
  return true;
}

// The params of a call with these options (no arrays), or false.
bool params_of(const c10::IValue *args, unsigned char *params) {
  const OpState &s = op_state;
  float scale = 0.0f, softcap = 0.0f;
  if (!args[7].isNone() && !float32_of(args[7].toDouble(), &scale))
    return false;
  if (!float32_of(args[6].toDouble(), &softcap)) return false;
  std::memcpy(params, s.defaults.data(), s.defaults.size());
  put(params, s.scale_at, scale);
  put(params, s.flags_at, args[3].toBool() ? s.causal_flag : 0u);
  put(params, s.left_at, static_cast<int64_t>(args[4].toInt()));
  put(params, s.right_at, static_cast<int64_t>(args[5].toInt()));
  put(params, s.softcap_at, softcap);
  return true;
}

// This thread's default context handle (the package makes it on first
// use), through the package: it is per Python thread.
void *default_context() {
  pybind11::gil_scoped_acquire locked;
  PyObject *address = PyObject_CallObject(op_state.context_address, nullptr);
  if (!address) throw pybind11::error_already_set();
  void *handle = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (!handle && PyErr_Occurred()) throw pybind11::error_already_set();
  return handle;
}

// The common call: the new output, or an undefined tensor where the call
// is anything else or the library refused it.
at::Tensor attention_common(const c10::IValue *args) {
  if (!attention_fn || !args[9].isNone() || !args[10].isNone() ||
      !args[8].isString())
    return {};
  const std::string &layout = args[8].toStringRef();
  const bool bhsd = layout == "bhsd";
  if (!bhsd && layout != "bshd") return {};
  alignas(16) unsigned char params[512];
  if (op_state.defaults.size() > sizeof params || !params_of(args, params))
    return {};
  const at::Tensor &q = args[0].toTensor(), &k = args[1].toTensor(),
                   &v = args[2].toTensor();
  Tensor views[4];
  if (!view_of(q, bhsd, &views[0]) || !view_of(k, bhsd, &views[1]) ||
      !view_of(v, bhsd, &views[2]))
    return {};
  at::Tensor out =
      at::empty({q.size(0), q.size(1), q.size(2), v.size(3)},
                at::TensorOptions().dtype(q.scalar_type()));
  if (!view_of(out, bhsd, &views[3])) return {};
  void *context = default_context();
  int status;
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release unlocked;
    status = attention_fn(context, &views[0], &views[1], &views[2], &views[3],
                          nullptr, params);
  } else {
    status = attention_fn(context, &views[0], &views[1], &views[2], &views[3],
                          nullptr, params);
  }
  return status == 0 ? out : at::Tensor();
}

pybind11::object python_of(const c10::IValue &value) {
  if (value.isNone()) return pybind11::none();
  if (value.isTensor()) return pybind11::cast(value.toTensor());
  if (value.isBool()) return pybind11::bool_(value.toBool());
  if (value.isInt()) return pybind11::int_(value.toInt());
  if (value.isDouble()) return pybind11::float_(value.toDouble());
  return pybind11::str(value.toStringRef());
}

// The Python kernel on the same arguments: its result, or its exception.
at::Tensor attention_in_python(const c10::IValue *args) {
  pybind11::gil_scoped_acquire locked;
  pybind11::tuple given(kAttentionArgs);
  for (size_t i = 0; i < kAttentionArgs; i++) given[i] = python_of(args[i]);
  pybind11::object result =
      pybind11::reinterpret_borrow<pybind11::object>(op_state.python_kernel)(
          *given);
  return result.cast<at::Tensor>();
}

void attention_op(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  const c10::IValue *args = stack->data() + stack->size() - kAttentionArgs;
  at::Tensor out = attention_common(args);
  if (!out.defined()) out = attention_in_python(args);
  stack->erase(stack->end() - kAttentionArgs, stack->end());
  stack->emplace_back(std::move(out));
}

// Registers attention_op as flashcpu::attention's CPU kernel (the schema
// defined already). defaults: AttentionParams' bytes at the library's
// defaults; offsets: of scale, flags, window_left, window_right and
// softcap in it.
void register_ops(pybind11::bytes defaults, std::vector<int64_t> offsets,
                  int64_t causal_flag, pybind11::object context_address,
                  pybind11::object python_kernel) {
  if (offsets.size() != 5)
    throw std::invalid_argument("register_ops: 5 offsets expected");
  const std::string bytes = defaults;
  OpState state;
  state.defaults.assign(bytes.begin(), bytes.end());
  for (int64_t at : offsets)
    if (at < 0 || static_cast<size_t>(at) + 8 > bytes.size())
      throw std::invalid_argument("register_ops: an offset past the params");
  state.scale_at = offsets[0], state.flags_at = offsets[1];
  state.left_at = offsets[2], state.right_at = offsets[3];
  state.softcap_at = offsets[4];
  state.causal_flag = static_cast<uint32_t>(causal_flag);
  // Kept for the life of the process: a kernel may run on any thread.
  state.context_address = context_address.release().ptr();
  state.python_kernel = python_kernel.release().ptr();
  op_library.reset();
  op_state = std::move(state);
  op_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "flashcpu", c10::DispatchKey::CPU, __FILE__,
      __LINE__);
  op_library->impl("attention",
                   torch::CppFunction::makeFromBoxedFunction<&attention_op>());
}

void deregister_ops() { op_library.reset(); }

} // namespace
