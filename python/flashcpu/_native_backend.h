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

// Optional timing of one-row (decode) calls for tools: how long the
// function and the library call inside it took, in nanoseconds.
bool backend_timing = false;
int64_t timed_calls = 0, timed_whole_ns = 0, timed_library_ns = 0;
// Where the rest goes: the arguments and params, the context, the views
// and the output, the library call with the GIL's release, the result.
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

void set_backend(pybind11::object fallback) {
  Py_XDECREF(backend_fallback);
  backend_fallback = fallback.release().ptr();
}

// A new [B, L, H, Dv] output of q's dtype for q, k, v [B, H, seq, D] read
// in place, written through its [B, H, L, Dv] view by flashcpu_attention
// with the GIL released: the output, *status 0; else an undefined tensor
// and the library's status, or -1 where the tensors are not for this path.
// The output comes straight from the CPU allocator: through the
// dispatcher, at::empty costs several microseconds more with a model's
// weights in the caches.
at::Tensor new_output_call(const at::Tensor &q, const at::Tensor &k,
                           const at::Tensor &v, void *context,
                           const void *params, int64_t *status,
                           int64_t *library_ns) {
  Tensor views[4];
  *status = -1;
  if (!attention_fn || q.scalar_type() != k.scalar_type() ||
      q.scalar_type() != v.scalar_type() || !view_of(q, true, &views[0]) ||
      !view_of(k, true, &views[1]) || !view_of(v, true, &views[2]))
    return at::Tensor();
  at::Tensor out(at::detail::empty_cpu(
      {q.size(0), q.size(2), q.size(1), v.size(3)}, q.scalar_type()));
  if (!view_of(out, false, &views[3])) return at::Tensor();
  mark(kStageCall);
  {
    pybind11::gil_scoped_release unlocked;
    const int64_t start = backend_timing ? now_ns() : 0;
    *status = attention_fn(context, &views[0], &views[1], &views[2], &views[3],
                           nullptr, params);
    if (backend_timing) *library_ns = now_ns() - start;
  }
  mark(kStageResult);
  return *status == 0 ? out : at::Tensor();
}

// The Python backend function's compiled call (_model_call.attention):
// (status, out) as new_output_call gives them.
std::tuple<int64_t, at::Tensor> attention_new(const at::Tensor &q,
                                              const at::Tensor &k,
                                              const at::Tensor &v,
                                              int64_t context, int64_t params) {
  int64_t status, library_ns;
  at::Tensor out = new_output_call(q, k, v, reinterpret_cast<void *>(context),
                                   reinterpret_cast<const void *>(params),
                                   &status, &library_ns);
  return {status, out};
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
  if (!attention_fn || PyTuple_GET_SIZE(args) != 5 ||
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
  const bool has_scale = !absent_or_none(scaling);
  alignas(16) unsigned char params[kParamsBytes];
  if ((has_scale && !PyFloat_CheckExact(scaling)) ||
      !plain_params(causal, -1, -1, 0.0, has_scale,
                    has_scale ? PyFloat_AS_DOUBLE(scaling) : 0.0, params))
    return at::Tensor();
  mark(kStageContext);
  void *context = default_context();
  mark(kStageOutput);
  if (!context) return at::Tensor();
  int64_t status;
  at::Tensor out =
      new_output_call(q, k, v, context, params, &status, library_ns);
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
