// The transformers backend's attention function in C++ (included by
// _native_attention.cpp inside its namespace): inside generate() the Python
// around a call runs with its caches cold, tens of microseconds a call, so
// the common call (no mask, window, cap, sinks or dropout) reads its
// arguments, makes the output and calls the library here. Anything else,
// and any call the library refuses, goes to the Python function given at
// set_backend, which computes it or raises with the library's message (the
// library writes nothing on error, so the second call sees what the first
// saw).

PyObject *backend_fallback = nullptr; // flashcpu.transformers' function
PyObject *backend_params = nullptr;   // _api.plain_params_address
PyObject *backend_context = nullptr;  // _context.default_address

// Bumped by the package whenever a default context is made or any context
// closed: a thread's cached default context address is then looked up again.
std::atomic<int64_t> context_generation{0};
thread_local int64_t cached_generation = -1;
thread_local int64_t cached_context = 0;

// (causal, scale) -> params address, kept for the process (a model has one
// or two); the owner keeps the params alive. Guarded by the GIL.
struct BackendParams {
  bool causal;
  bool default_scale;
  double scale;
  int64_t address;
  PyObject *owner;
};
constexpr int kBackendParams = 32;
BackendParams backend_params_cache[kBackendParams];
int backend_params_count = 0;

// Optional timing of one-row (decode) calls for tools: how long the
// function and the library call inside it took, in nanoseconds.
bool backend_timing = false;
int64_t timed_calls = 0, timed_whole_ns = 0, timed_library_ns = 0;
// Where the rest goes: the arguments and params, the context, the output,
// the library call with the GIL's release, the result tuple.
enum {
  kStageArguments,
  kStageContext,
  kStageOutput,
  kStageCall,
  kStageResult,
  kStages
};
int64_t timed_stage_ns[kStages];
int64_t stage_mark[kStages + 1];

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_backend_timing(bool on) {
  backend_timing = on;
  timed_calls = timed_whole_ns = timed_library_ns = 0;
  for (int64_t &t : timed_stage_ns) t = 0;
}

std::tuple<int64_t, int64_t, int64_t> backend_times() {
  return {timed_calls, timed_whole_ns, timed_library_ns};
}

std::vector<int64_t> backend_stage_times() {
  return std::vector<int64_t>(timed_stage_ns, timed_stage_ns + kStages);
}

void mark(int stage) {
  if (backend_timing) stage_mark[stage] = now_ns();
}

PyObject *interned(const char *name) {
  PyObject *s = PyUnicode_InternFromString(name);
  if (!s) throw pybind11::error_already_set();
  return s;
}

void set_backend(pybind11::object fallback, pybind11::object params,
                 pybind11::object context) {
  Py_XDECREF(backend_fallback);
  Py_XDECREF(backend_params);
  Py_XDECREF(backend_context);
  backend_fallback = fallback.release().ptr();
  backend_params = params.release().ptr();
  backend_context = context.release().ptr();
}

void bump_context_generation() { context_generation.fetch_add(1); }

// The params address for (causal, scale), 0 where it cannot be had here.
int64_t backend_params_address(bool causal, PyObject *scaling) {
  const bool default_scale = scaling == Py_None;
  double scale = 0.0;
  if (!default_scale) {
    if (!PyFloat_CheckExact(scaling)) return 0;
    scale = PyFloat_AS_DOUBLE(scaling);
  }
  for (int i = 0; i < backend_params_count; i++) {
    const BackendParams &e = backend_params_cache[i];
    if (e.causal == causal && e.default_scale == default_scale &&
        (default_scale || e.scale == scale))
      return e.address;
  }
  if (backend_params_count == kBackendParams || !backend_params) return 0;
  pybind11::object found = pybind11::reinterpret_borrow<pybind11::object>(
      backend_params)(causal, pybind11::make_tuple(-1, -1), 0.0,
                      pybind11::reinterpret_borrow<pybind11::object>(scaling));
  if (found.is_none()) return 0;
  const int64_t address = pybind11::cast<int64_t>(found[pybind11::int_(1)]);
  backend_params_cache[backend_params_count++] = {
      causal, default_scale, scale, address, found.release().ptr()};
  return address;
}

int64_t backend_context_address() {
  const int64_t now = context_generation.load();
  if (cached_generation != now) {
    cached_context = pybind11::cast<int64_t>(
        pybind11::reinterpret_borrow<pybind11::object>(backend_context)());
    cached_generation = now;
  }
  return cached_context;
}

// The option a keyword gives, nullptr where it is absent.
PyObject *keyword(PyObject *kwargs, PyObject *name) {
  return kwargs ? PyDict_GetItem(kwargs, name) : nullptr;
}

bool absent_or_none(PyObject *value) { return !value || value == Py_None; }

bool zero_or_absent(PyObject *value) {
  if (absent_or_none(value)) return true;
  if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value) == 0.0;
  if (!PyLong_CheckExact(value)) return false;
  int overflow = 0; // Py_SIZE no longer reads an int's size on Python 3.12
  return PyLong_AsLongLongAndOverflow(value, &overflow) == 0 && !overflow;
}

// The backend's result (out [B, L, H, Dv], None) of the common call, or an
// undefined tensor where it is not one.
at::Tensor backend_call(PyObject *args, PyObject *kwargs, int64_t *library_ns) {
  static PyObject *const k_dropout = interned("dropout");
  static PyObject *const k_scaling = interned("scaling");
  static PyObject *const k_window = interned("sliding_window");
  static PyObject *const k_softcap = interned("softcap");
  static PyObject *const k_sinks = interned("s_aux");
  static PyObject *const k_is_causal = interned("is_causal");
  if (!attention_fn || !backend_context || PyTuple_GET_SIZE(args) != 5 ||
      PyTuple_GET_ITEM(args, 4) != Py_None ||
      !zero_or_absent(keyword(kwargs, k_dropout)) ||
      !absent_or_none(keyword(kwargs, k_window)) ||
      !zero_or_absent(keyword(kwargs, k_softcap)) ||
      !absent_or_none(keyword(kwargs, k_sinks)))
    return at::Tensor();
  PyObject *tensors[3] = {PyTuple_GET_ITEM(args, 1), PyTuple_GET_ITEM(args, 2),
                          PyTuple_GET_ITEM(args, 3)};
  for (PyObject *t : tensors)
    if (!THPVariable_Check(t)) return at::Tensor();
  const at::Tensor &q = THPVariable_Unpack(tensors[0]);
  const at::Tensor &k = THPVariable_Unpack(tensors[1]);
  const at::Tensor &v = THPVariable_Unpack(tensors[2]);
  PyObject *is_causal = keyword(kwargs, k_is_causal);
  bool causal = true;
  if (!absent_or_none(is_causal)) {
    const int truth = PyObject_IsTrue(is_causal);
    if (truth < 0) throw pybind11::error_already_set();
    causal = truth != 0;
  } else {
    static PyObject *const a_is_causal = interned("is_causal");
    PyObject *module = PyTuple_GET_ITEM(args, 0);
    PyObject *attribute = PyObject_GetAttr(module, a_is_causal);
    if (!attribute) {
      PyErr_Clear();
    } else {
      const int truth = PyObject_IsTrue(attribute);
      Py_DECREF(attribute);
      if (truth < 0) throw pybind11::error_already_set();
      causal = truth != 0;
    }
  }
  PyObject *scaling = keyword(kwargs, k_scaling);
  const int64_t params =
      backend_params_address(causal, scaling ? scaling : Py_None);
  Tensor views[4];
  if (!params || q.scalar_type() != k.scalar_type() ||
      q.scalar_type() != v.scalar_type() || !view_of(q, true, &views[0]) ||
      !view_of(k, true, &views[1]) || !view_of(v, true, &views[2]))
    return at::Tensor();
  mark(kStageContext);
  const int64_t context = backend_context_address();
  mark(kStageOutput);
  // Straight to the CPU allocator: through the dispatcher, at::empty costs
  // several microseconds more with the model's weights in the caches.
  at::Tensor out(at::detail::empty_cpu(
      {q.size(0), q.size(2), q.size(1), v.size(3)}, q.scalar_type()));
  if (!view_of(out, false, &views[3])) return at::Tensor();
  mark(kStageCall);
  int status;
  {
    pybind11::gil_scoped_release unlocked;
    const int64_t start = backend_timing ? now_ns() : 0;
    status = attention_fn(reinterpret_cast<void *>(context), &views[0],
                          &views[1], &views[2], &views[3], nullptr,
                          reinterpret_cast<const void *>(params));
    if (backend_timing) *library_ns = now_ns() - start;
  }
  mark(kStageResult);
  return status == 0 ? out : at::Tensor();
}

// transformers' attention function: (module, query, key, value,
// attention_mask, **options) -> (out, None).
pybind11::object backend_forward(pybind11::args args, pybind11::kwargs kwargs) {
  const int64_t start = backend_timing ? now_ns() : 0;
  stage_mark[kStageArguments] = start;
  int64_t library_ns = 0;
  at::Tensor out = backend_call(args.ptr(), kwargs.ptr(), &library_ns);
  if (out.defined()) {
    pybind11::object result = pybind11::make_tuple(out, pybind11::none());
    if (backend_timing && out.size(1) == 1) {
      const int64_t end = now_ns();
      stage_mark[kStages] = end;
      timed_calls++;
      timed_whole_ns += end - start;
      timed_library_ns += library_ns;
      for (int i = 0; i < kStages; i++)
        timed_stage_ns[i] += stage_mark[i + 1] - stage_mark[i];
    }
    return result;
  }
  if (!backend_fallback)
    throw std::runtime_error("flashcpu.native: set_backend was not called");
  return pybind11::reinterpret_borrow<pybind11::object>(backend_fallback)(
      *args, **kwargs);
}
