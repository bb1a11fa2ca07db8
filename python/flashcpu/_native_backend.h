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

// The last decode result, (out, None), handed out again once nobody else
// holds it: a new output costs the allocator's bookkeeping and a new
// Python object, several microseconds a call with a model's weights in the
// caches. Results past kSpareBytes are not kept (a prefill's output would
// stay alive between calls). The addresses are kept to prefetch them.
constexpr int64_t kSpareBytes = 1 << 20;
struct Spare {
  PyObject *result, *out;
  const void *impl, *storage, *type_line, *weaklist;
};

// The keywords the function reads; their names are interned once.
enum { kDropout, kScaling, kWindow, kSoftcap, kSinks, kIsCausal, kOptions };

// What every call reads, in two lines.
struct alignas(64) Hot {
  Spare spare;
  PyObject *names[kOptions];
  PyTypeObject *tensor_type; // a type that THPVariable_Check accepted
};
Hot hot;

// True where another Python thread could wait for the GIL during a call:
// the interpreter has another thread state. With none, keeping the GIL
// through the call costs nobody anything and saves its release and
// retake, about a microsecond with a model's weights in the caches.
bool others_may_wait() {
  PyThreadState *self = PyThreadState_Get();
  return PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(self)) !=
             self ||
         PyThreadState_Next(self) != nullptr;
}

// Releases the GIL for its life where others_may_wait.
class ReleaseIfOthers {
public:
  ReleaseIfOthers()
      : saved_(others_may_wait() ? PyEval_SaveThread() : nullptr) {}
  ~ReleaseIfOthers() {
    if (saved_) PyEval_RestoreThread(saved_);
  }
  ReleaseIfOthers(const ReleaseIfOthers &) = delete;
  ReleaseIfOthers &operator=(const ReleaseIfOthers &) = delete;

private:
  PyThreadState *saved_;
};

void prefetch_lines(const void *at, int lines) {
  if (!at) return;
  for (int i = 0; i < lines; i++)
    __builtin_prefetch(static_cast<const char *>(at) + 64 * i);
}

// Where object's weak references start, or nullptr for a type without
// them: after the object, or before it (a negative offset) where Python
// 3.12 and later manage the list.
PyObject **weaklist_of(PyObject *object) {
  const Py_ssize_t at = Py_TYPE(object)->tp_weaklistoffset;
  return at ? reinterpret_cast<PyObject **>(reinterpret_cast<char *>(object) +
                                            at)
            : nullptr;
}

// c10::InferenceMode::is_enabled(), read inline: inference mode is on
// exactly when ADInplaceOrView is not in the thread's included keys (c10
// keeps the two in step).
bool inference_mode() {
  return !c10::impl::tls_local_dispatch_key_set().included_.has(
      c10::DispatchKey::ADInplaceOrView);
}

// True where spare's output can be handed out as a new [sizes] output of
// dtype: only the spare holds its result, its Python object, its tensor
// and its storage (no view, no weak reference), and it has the sizes,
// layout, dtype and grad and inference state a new one would have.
bool spare_fits(const int64_t sizes[4], at::ScalarType dtype) {
  if (!hot.spare.result || Py_REFCNT(hot.spare.result) != 1 ||
      Py_REFCNT(hot.spare.out) != 1)
    return false;
  PyObject **weaklist = weaklist_of(hot.spare.out);
  if (weaklist && *weaklist) return false;
  const at::Tensor &t = THPVariable_Unpack(hot.spare.out);
  return t.use_count() == 1 && t.weak_use_count() == 1 &&
         t.storage().use_count() == 1 && t.scalar_type() == dtype &&
         t.sizes() == at::IntArrayRef(sizes, 4) && t.is_contiguous() &&
         t.storage_offset() == 0 && !t.requires_grad() &&
         !t.unsafeGetTensorImpl()->has_named_tensor_meta() &&
         t.is_inference() == inference_mode();
}

// Keeps (out, None) as the spare result where out is small enough; returns
// a new reference to the result, nullptr with a Python error set.
PyObject *result_of(const at::Tensor &out) {
  PyObject *tensor = THPVariable_Wrap(out);
  if (!tensor) return nullptr;
  PyObject *result = PyTuple_Pack(2, tensor, Py_None);
  Py_DECREF(tensor);
  if (!result || out.nbytes() > static_cast<size_t>(kSpareBytes)) return result;
  Py_XDECREF(hot.spare.result);
  Py_INCREF(result);
  hot.spare = {result,
               tensor,
               out.unsafeGetTensorImpl(),
               out.storage().unsafeGetStorageImpl(),
               &Py_TYPE(tensor)->tp_weaklistoffset,
               weaklist_of(tensor)};
  return result;
}

// A [B, L, H, Dv] output of q's dtype for q, k, v [B, H, seq, D] read in
// place, written through its [B, H, L, Dv] view by flashcpu_attention
// (the GIL released where another thread could wait): the output, *status 0;
// else an undefined tensor and the library's status, or -1 where the tensors
// are not for this path. With taken, the spare result's output is used where it
// fits, and *taken is a new reference to that result (else nullptr). A new
// output comes straight from the CPU allocator: through the dispatcher,
// at::empty costs several microseconds more with a model's weights in the
// caches.
at::Tensor output_call(const at::Tensor &q, const at::Tensor &k,
                       const at::Tensor &v, void *context, const void *params,
                       int64_t *status, int64_t *library_ns, PyObject **taken) {
  Tensor views[4];
  *status = -1;
  if (taken) *taken = nullptr;
  if (!attention_fn || !context || q.scalar_type() != k.scalar_type() ||
      q.scalar_type() != v.scalar_type() || !view_of(q, true, &views[0]) ||
      !view_of(k, true, &views[1]) || !view_of(v, true, &views[2]))
    return at::Tensor();
  const int64_t sizes[4] = {q.size(0), q.size(2), q.size(1), v.size(3)};
  at::Tensor out;
  if (taken && spare_fits(sizes, q.scalar_type())) {
    *taken = hot.spare.result;
    Py_INCREF(*taken); // so that no other call hands it out meanwhile
    out = THPVariable_Unpack(hot.spare.out);
  } else {
    out = at::detail::empty_cpu(at::IntArrayRef(sizes, 4), q.scalar_type());
  }
  if (view_of(out, false, &views[3])) {
    mark(kStageCall);
    ReleaseIfOthers unlocked;
    const int64_t start = backend_timing ? now_ns() : 0;
    *status = attention_fn(context, &views[0], &views[1], &views[2], &views[3],
                           nullptr, params);
    if (backend_timing) *library_ns = now_ns() - start;
  }
  mark(kStageResult);
  if (*status == 0) return out;
  if (taken) Py_CLEAR(*taken);
  return at::Tensor();
}

// The Python backend function's compiled call (_model_call.attention):
// (status, out) as output_call gives them, out always a new tensor.
std::tuple<int64_t, at::Tensor> attention_new(const at::Tensor &q,
                                              const at::Tensor &k,
                                              const at::Tensor &v,
                                              int64_t context, int64_t params) {
  int64_t status, library_ns;
  at::Tensor out = output_call(q, k, v, reinterpret_cast<void *>(context),
                               reinterpret_cast<const void *>(params), &status,
                               &library_ns, nullptr);
  return {status, out};
}

// Which option key names (kOptions for none): by identity (interned
// strings, as keywords in code are), else by value.
int option_of(PyObject *key) {
  PyObject *const *names = hot.names;
  for (int i = 0; i < kOptions; i++)
    if (key == names[i]) return i;
  if (PyUnicode_CHECK_INTERNED(key)) return kOptions;
  for (int i = 0; i < kOptions; i++)
    if (PyUnicode_Compare(key, names[i]) == 0) return i;
  return kOptions;
}

// The values of the keywords the function reads in a vectorcall's keywords
// (after the positional arguments), nullptr where absent.
void read_options(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject *values[kOptions]) {
  if (!hot.names[kOptions - 1]) {
    const char *text[kOptions] = {"dropout", "scaling", "sliding_window",
                                  "softcap", "s_aux",   "is_causal"};
    PyObject *names[kOptions];
    for (int i = 0; i < kOptions; i++) names[i] = interned(text[i]);
    std::copy(names, names + kOptions, hot.names);
  }
  for (int i = 0; i < kOptions; i++) values[i] = nullptr;
  const Py_ssize_t n = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < n; k++) {
    const int i = option_of(PyTuple_GET_ITEM(kwnames, k));
    if (i < kOptions) values[i] = args[nargs + k];
  }
}

bool absent_or_none(PyObject *value) { return !value || value == Py_None; }

bool zero_or_absent(PyObject *value) {
  if (absent_or_none(value)) return true;
  if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value) == 0.0;
  if (!PyLong_CheckExact(value)) return false;
  int overflow = 0; // Py_SIZE no longer reads an int's size on Python 3.12
  return PyLong_AsLongLongAndOverflow(value, &overflow) == 0 && !overflow;
}

// Asks at once for every line the common call reads at an address known
// on entry: with a model's weights in the caches each would be a miss in
// turn.
void prefetch_call(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  const Spare &s = hot.spare;
  prefetch_lines(&hot, 2);
  prefetch_lines(&package, 4);
  prefetch_lines(&context_generation, 1);
  prefetch_lines(&THPVariableClass, 1);
  prefetch_lines(s.result, 1);
  prefetch_lines(s.out, 1);
  prefetch_lines(s.impl, 4);
  prefetch_lines(s.storage, 1);
  prefetch_lines(s.type_line, 1);
  prefetch_lines(s.weaklist, 1);
  for (Py_ssize_t i = 0; i < nargs && i < 4; i++) prefetch_lines(args[i], 1);
  if (!kwnames) return;
  prefetch_lines(kwnames, 1);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
    prefetch_lines(PyTuple_GET_ITEM(kwnames, i), 1);
    prefetch_lines(args[nargs + i], 1);
  }
}

// The backend's result (out [B, L, H, Dv], None) of the common call as a
// new reference; nullptr without an error where it is not one, nullptr
// with a Python error set where reading an argument raised.
PyObject *backend_call(PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, int64_t *library_ns) {
  if (!attention_fn || nargs != 5 || args[4] != Py_None) return nullptr;
  PyObject *options[kOptions];
  read_options(args, nargs, kwnames, options);
  if (!zero_or_absent(options[kDropout]) || !absent_or_none(options[kWindow]) ||
      !zero_or_absent(options[kSoftcap]) || !absent_or_none(options[kSinks]))
    return nullptr;
  for (int i = 1; i < 4; i++) {
    if (Py_TYPE(args[i]) == hot.tensor_type) continue;
    if (!THPVariable_Check(args[i])) return nullptr;
    hot.tensor_type = Py_TYPE(args[i]); // all its objects are tensors
  }
  const at::Tensor &q = THPVariable_Unpack(args[1]);
  const at::Tensor &k = THPVariable_Unpack(args[2]);
  const at::Tensor &v = THPVariable_Unpack(args[3]);
  for (const at::Tensor *t : {&q, &k, &v})
    prefetch_lines(t->unsafeGetTensorImpl(), 4);
  PyObject *is_causal = options[kIsCausal];
  bool causal = true;
  if (!absent_or_none(is_causal)) {
    const int truth = PyObject_IsTrue(is_causal);
    if (truth < 0) return nullptr;
    causal = truth != 0;
  } else if (q.size(2) > 1) { // one row sees every key either way (the
                              // library's causal mask is bottom-right)
    PyObject *attribute = PyObject_GetAttr(args[0], hot.names[kIsCausal]);
    if (!attribute) {
      PyErr_Clear();
    } else {
      const int truth = PyObject_IsTrue(attribute);
      Py_DECREF(attribute);
      if (truth < 0) return nullptr;
      causal = truth != 0;
    }
  }
  PyObject *scaling = options[kScaling];
  const bool has_scale = !absent_or_none(scaling);
  alignas(16) unsigned char params[kParamsBytes];
  if ((has_scale && !PyFloat_CheckExact(scaling)) ||
      !plain_params(causal, -1, -1, 0.0, has_scale,
                    has_scale ? PyFloat_AS_DOUBLE(scaling) : 0.0, params))
    return nullptr;
  for (const at::Tensor *t : {&q, &k, &v}) // their impls have come by now
    prefetch_lines(t->storage().unsafeGetStorageImpl(), 1);
  mark(kStageContext);
  void *context = default_context(true);
  mark(kStageOutput);
  int64_t status;
  PyObject *taken;
  at::Tensor out =
      output_call(q, k, v, context, params, &status, library_ns, &taken);
  if (status != 0) return nullptr;
  return taken ? taken : result_of(out);
}

// transformers' attention function, a vectorcall: (module, query, key,
// value, attention_mask, **options) -> (out, None).
PyObject *backend_forward(PyObject *, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames) {
  const int64_t start = backend_timing ? now_ns() : 0;
  stage_mark[kStageArguments] = start;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  prefetch_call(args, nargs, kwnames);

  int64_t library_ns = 0;
  PyObject *result = nullptr;
  try {
    result = backend_call(args, nargs, kwnames, &library_ns);
  } catch (const std::exception &) { // not this path's call: the fallback
    PyErr_Clear();                   // raises or computes it
  }
  if (result) {
    if (backend_timing && nargs > 1 &&
        THPVariable_Unpack(args[1]).size(2) == 1) {
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
  if (PyErr_Occurred()) return nullptr;
  if (!backend_fallback) {
    PyErr_SetString(PyExc_RuntimeError,
                    "flashcpu.native: set_backend was not called");
    return nullptr;
  }
  return PyObject_Vectorcall(backend_fallback, args, nargsf, kwnames);
}

PyMethodDef backend_forward_def = {
    "backend_forward", reinterpret_cast<PyCFunction>(backend_forward),
    METH_FASTCALL | METH_KEYWORDS,
    "transformers' attention function: (module, query, key, value, "
    "attention_mask, **options) -> (out, None)"};
