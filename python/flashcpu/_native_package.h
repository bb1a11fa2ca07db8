// What the extension's C++ calls take from the package, given once by
// set_package when the extension loads (flashcpu.native): the params'
// layout at the library's defaults, to make a call's params in place, and
// how to find the thread's default context. Included by
// _native_attention.cpp inside its namespace, before the transformers
// function (_native_backend.h) and the torch ops' kernels (_native_op.h),
// which both use it.

// The most params bytes a call makes on its stack.
constexpr size_t kParamsBytes = 512;

// Held inline, the offsets first: a call reads the first lines of one
// object, which the transformers function prefetches.
struct alignas(64) Package {
  size_t size; // of defaults; 0 until set_package
  size_t scale_at, flags_at, left_at, right_at, softcap_at, sinks_at,
      sinks_dtype_at;
  uint32_t causal_flag;
  PyObject *context_address; // () -> the thread's default context handle
  unsigned char defaults[kParamsBytes]; // AttentionParams, library defaults
};
Package package;

// defaults: AttentionParams' bytes at the library's defaults; offsets: of
// scale, flags, window_left, window_right, softcap, sinks and sinks_dtype
// in it.
void set_package(pybind11::bytes defaults, std::vector<int64_t> offsets,
                 int64_t causal_flag, pybind11::object context_address) {
  if (offsets.size() != 7)
    throw std::invalid_argument("set_package: 7 offsets expected");
  const std::string bytes = defaults;
  if (bytes.size() > kParamsBytes)
    throw std::invalid_argument("set_package: params larger than expected");
  for (int64_t at : offsets)
    if (at < 0 || static_cast<size_t>(at) + 8 > bytes.size())
      throw std::invalid_argument("set_package: an offset past the params");
  Package p{};
  p.size = bytes.size();
  std::memcpy(p.defaults, bytes.data(), bytes.size());
  p.scale_at = offsets[0], p.flags_at = offsets[1];
  p.left_at = offsets[2], p.right_at = offsets[3];
  p.softcap_at = offsets[4], p.sinks_at = offsets[5];
  p.sinks_dtype_at = offsets[6];
  p.causal_flag = static_cast<uint32_t>(causal_flag);
  // Kept for the life of the process: a kernel may run on any thread.
  p.context_address = context_address.release().ptr();
  package = p;
}

template <typename T> void put(unsigned char *params, size_t at, T value) {
  std::memcpy(params + at, &value, sizeof value);
}

// value as the float32 the Python path would store, or false where it
// would refuse it or the library would (a non-zero value that rounds to 0,
// inf, NaN): the Python path then says so.
bool float32_of(double value, float *out) {
  const float f = static_cast<float>(value);
  if (!(value == value) || value > 3.4028234663852886e38 ||
      value < -3.4028234663852886e38 || (value != 0.0 && f == 0.0f))
    return false;
  *out = f;
  return true;
}

// The params of a call without arrays into params (kParamsBytes), or false
// where an option is not one to take here or the package gave no layout.
// has_scale false: the default scale.
bool plain_params(bool causal, int64_t left, int64_t right, double softcap,
                  bool has_scale, double scale, unsigned char *params) {
  const Package &s = package;
  float scale32 = 0.0f, softcap32 = 0.0f;
  if (!s.size || (has_scale && !float32_of(scale, &scale32)) ||
      !float32_of(softcap, &softcap32))
    return false;
  std::memcpy(params, s.defaults, s.size);
  put(params, s.scale_at, scale32);
  put(params, s.flags_at, causal ? s.causal_flag : 0u);
  put(params, s.left_at, left);
  put(params, s.right_at, right);
  put(params, s.softcap_at, softcap32);
  return true;
}

// This thread's default context handle (the package makes it on first
// use), looked up through the package (it is per Python thread) and kept
// until the package makes or closes a context (bump_context_generation):
// the common call takes neither the GIL nor a Python step for it. NULL on
// a thread without a Python thread state: one made for the lookup would
// take the context with it when it goes, so the Python path (which holds
// the context while it calls) takes such calls. A caller that holds the
// GIL has a thread state and says so (has_gil): the check reads cold
// thread data.
std::atomic<int64_t> context_generation{0};
thread_local int64_t context_seen = -1;
thread_local void *context_cached = nullptr;

void bump_context_generation() { context_generation.fetch_add(1); }

void *default_context(bool has_gil = false) {
  if (!package.context_address ||
      (!has_gil && !PyGILState_GetThisThreadState()))
    return nullptr;
  const int64_t now = context_generation.load();
  if (context_seen == now && context_cached) return context_cached;
  pybind11::gil_scoped_acquire locked;
  PyObject *address = PyObject_CallObject(package.context_address, nullptr);
  if (!address) throw pybind11::error_already_set();
  void *handle = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (!handle && PyErr_Occurred()) throw pybind11::error_already_set();
  context_cached = handle;
  context_seen = now;
  return handle;
}
