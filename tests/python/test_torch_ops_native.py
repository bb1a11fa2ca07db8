"""torch.ops.flashcpu.attention on its two CPU kernels: the C++ one that
flashcpu.native registers when it loads, and the Python one that serves
without the extension. Both give flashcpu.attention's bytes and raise the
same errors with the same messages; the C++ one runs no Python kernel.
Skipped, with the reason, where the extension cannot be built."""

import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

import flashcpu  # noqa: E402
import flashcpu.native as native  # noqa: E402
import flashcpu.torch_ops as ops  # noqa: E402
from test_native import _missing  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def compiled():
    """The extension, built in the run's own FLASHCPU_NATIVE_DIR (or found
    there, built by test_native.py): loading it moves the kernel to C++."""
    reason = _missing()
    if reason:
        pytest.skip(f"cannot build flashcpu.native: {reason}")
    native.reset()
    module = native.available() or native.build()
    assert ops.compiled()  # registered when it loaded, torch_ops being imported
    yield module
    ops.use_python()
    native._module = False  # the other tests keep the ctypes path


def both_kernels(compiled, call):
    """call() with the C++ kernel serving, then with the Python one."""
    ops.use_native(compiled)
    first = call()
    ops.use_python()
    try:
        second = call()
    finally:
        ops.use_native(compiled)
    return first, second


def bits(x):
    return x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)


def test_the_op_runs_no_python_kernel(compiled):
    # The dispatcher calls the C++ kernel: no frame of the Python kernel,
    # and none of the context lookup after the thread's first call.
    q, k = torch.randn(1, 1, 8, 64), torch.randn(1, 30, 2, 64)
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_name)

    def names():
        for _ in range(2):  # the thread's context made, then looked up once more
            torch.ops.flashcpu.attention(q, k, k, True)
        called.clear()
        sys.setprofile(profile)
        try:
            torch.ops.flashcpu.attention(q, k, k, True)
            torch.ops.flashcpu.attention(q, k, k, sinks=torch.zeros(8, dtype=torch.bfloat16))
        finally:
            sys.setprofile(None)
        return set(called)
    in_cpp, in_python = both_kernels(compiled, names)
    assert "_attention" not in in_cpp and "_attention" in in_python
    assert "default_address" not in in_cpp
    assert compiled.ops_registered()
    ops.use_python()
    assert not compiled.ops_registered() and not ops.compiled()
    ops.use_native(compiled)
    assert compiled.ops_registered() and ops.compiled()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_same_bytes_as_flashcpu_attention(compiled, dtype, layout):
    torch.manual_seed(7)
    shape = (2, 5, 8, 64) if layout == "bshd" else (2, 8, 5, 64)
    kv_shape = (2, 40, 2, 64) if layout == "bshd" else (2, 2, 40, 64)
    q, k = torch.randn(shape).to(dtype), torch.randn(kv_shape).to(dtype)
    v = torch.randn(kv_shape[:3] + (32,)).to(dtype)  # Dv not D
    for options in ({}, {"causal": True},
                    {"causal": True, "window_left": 9, "window_right": 0, "softcap": 15.0,
                     "scale": 0.2},
                    {"sinks": torch.linspace(-1, 1, 8)},
                    {"sinks": torch.linspace(-1, 1, 16).to(dtype)[::2]},  # strided: Python
                    {"sinks": torch.linspace(-1, 1, 8).double()}):        # float64: Python
        expected = torch.full(shape[:3] + (32,), float("nan"), dtype=dtype)
        flashcpu.attention(q, k, v, out=expected, layout=layout,
                           causal=options.get("causal", False),
                           window=(options.get("window_left", -1),
                                   options.get("window_right", -1)),
                           softcap=options.get("softcap", 0.0), scale=options.get("scale"),
                           sinks=options.get("sinks"))
        for out in both_kernels(compiled, lambda: torch.ops.flashcpu.attention(
                q, k, v, layout=layout, **options)):
            assert out.dtype == dtype and out.shape == expected.shape
            assert torch.equal(bits(out), bits(expected))
        assert not torch.isnan(expected).any()


def test_strided_views_and_positional_options(compiled):
    torch.manual_seed(8)
    q = torch.randn(3, 40, 12, 96)[:, :5, :8, :64]
    k = torch.randn(3, 2, 30, 64).transpose(1, 2)
    v = torch.randn(3, 2, 40, 64).transpose(1, 2)[:, 5:35]
    expected = flashcpu.attention(q, k, v, causal=True, window=(7, -1), softcap=0.0,
                                  scale=0.125)
    for out in both_kernels(compiled, lambda: torch.ops.flashcpu.attention(
            q, k, v, True, 7, -1, 0.0, 0.125, "bshd")):
        assert torch.equal(out, expected)


def test_from_another_thread(compiled):
    # Each Python thread has its own default context; the C++ kernel asks
    # for the calling thread's.
    torch.manual_seed(9)
    q, k = torch.randn(1, 3, 8, 64), torch.randn(1, 30, 2, 64)
    expected = flashcpu.attention(q, k, k, causal=True)
    results = []
    thread = threading.Thread(
        target=lambda: results.append(torch.ops.flashcpu.attention(q, k, k, True)))
    thread.start()
    thread.join()
    assert len(results) == 1 and torch.equal(results[0], expected)


def _error(call):
    with pytest.raises(flashcpu.Error) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("case", ["heads", "layout", "dtype", "scale", "dims", "window"])
def test_errors_the_same_on_both_kernels(compiled, case):
    q, k = torch.randn(1, 3, 8, 64), torch.randn(1, 20, 2, 64)
    k3 = torch.randn(1, 20, 3, 64)
    arguments, options = {
        "heads": ((q, k3, k3), {}),  # 8 heads, 3 KV heads
        "layout": ((q, k, k), {"layout": "hsbd"}),
        "dtype": ((q.double(), k.double(), k.double()), {}),
        "scale": ((q, k, k), {"scale": 1e-60}),  # rounds to 0 in float32
        "dims": ((q[0], k, k), {}),
        "window": ((q, k, k), {"window_left": -5}),
    }[case]
    expected = {"heads": flashcpu.ShapeMismatchError, "layout": flashcpu.InvalidArgumentError,
                "dtype": flashcpu.UnsupportedDtypeError,
                "scale": flashcpu.InvalidArgumentError, "dims": flashcpu.ShapeMismatchError,
                "window": flashcpu.InvalidArgumentError}[case]
    in_cpp, in_python = both_kernels(
        compiled, lambda: _error(lambda: torch.ops.flashcpu.attention(*arguments, **options)))
    assert in_cpp == in_python
    assert issubclass(in_cpp[0], expected) and in_cpp[1]


def test_meta_tensors_take_the_fake(compiled):
    # Inference tensors: torch 1.13 has no autograd fallthrough for Meta.
    with torch.inference_mode():
        q = torch.empty(2, 5, 8, 64, device="meta")
        k = torch.empty(2, 40, 2, 64, device="meta")
        v = torch.empty(2, 40, 2, 32, device="meta")
        out = torch.ops.flashcpu.attention(q, k, v, True)
    assert out.device.type == "meta" and out.shape == (2, 5, 8, 32)


def _in_a_new_process(code, **environment):
    env = dict(os.environ, **environment)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                      "python"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.split()


def test_a_new_process_finds_the_built_kernel(compiled):
    # Defined first, then the extension loads on import and registers.
    code = ("import torch, flashcpu.torch_ops as o\n"
            "q = torch.randn(1, 2, 4, 32)\n"
            "out = torch.ops.flashcpu.attention(q, q[:, :, :2], q[:, :, :2], True)\n"
            "print(o.compiled(), tuple(out.shape) == (1, 2, 4, 32))")
    assert _in_a_new_process(code) == ["True", "True"]
    assert _in_a_new_process(code, FLASHCPU_NATIVE="0") == ["False", "True"]


def test_without_the_extension_the_python_kernel_serves():
    # Needs no compiler: a folder with no build in it.
    code = ("import flashcpu.torch_ops as o, flashcpu.native as n\n"
            "print(o.compiled(), n.available() is None)")
    empty = os.path.join(os.environ["FLASHCPU_NATIVE_DIR"], "empty")
    assert _in_a_new_process(code, FLASHCPU_NATIVE_DIR=empty) == ["False", "True"]


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_kv_append_same_bytes_and_errors(compiled, layout):
    torch.manual_seed(10)
    shape = (6, 16, 2, 64) if layout == "nhd" else (6, 2, 16, 64)
    k_new = torch.randn(20, 2, 64)  # float32 rows into bf16 / f16 caches
    v_new = torch.randn(20, 2, 64)
    slots = torch.tensor([5 * 16 + i for i in range(16)] + [-1, 3, 40, 79])
    expected_k = torch.zeros(shape, dtype=torch.bfloat16)
    expected_v = torch.zeros(shape, dtype=torch.float16)
    flashcpu.kv_append(k_new, v_new, slots, flashcpu.PagedKV(expected_k, expected_v, layout))

    def call():
        k_cache = torch.zeros(shape, dtype=torch.bfloat16)
        v_cache = torch.zeros(shape, dtype=torch.float16)
        torch.ops.flashcpu.kv_append(k_new, v_new, slots, k_cache, v_cache, layout)
        return k_cache, v_cache
    for k_cache, v_cache in both_kernels(compiled, call):
        assert torch.equal(bits(k_cache), bits(expected_k))
        assert torch.equal(bits(v_cache), bits(expected_v))
    assert expected_k.abs().sum() > 0

    def bad(slot_mapping, rows=k_new):
        k_cache = torch.full(shape, 7.0, dtype=torch.bfloat16)
        v_cache = torch.full(shape, 7.0, dtype=torch.float16)
        error = _error(lambda: torch.ops.flashcpu.kv_append(rows, rows, slot_mapping, k_cache,
                                                            v_cache, layout))
        assert (k_cache == 7).all() and (v_cache == 7).all()  # nothing written
        return error
    for slot_mapping, rows in ((torch.tensor([96]), k_new[:1]),  # past the pool
                               (slots[:3], k_new),               # 3 slots, 20 rows
                               (slots.float(), k_new)):          # not integers
        in_cpp, in_python = both_kernels(compiled, lambda: bad(slot_mapping, rows))
        assert in_cpp == in_python and in_cpp[1]


def test_a_thread_without_python(compiled):
    # torch.jit.fork runs the scripted call on torch's inter-op pool, a
    # thread with no Python thread state: the Python kernel takes it.
    @torch.jit.script
    def call(q, k):
        return torch.ops.flashcpu.attention(q, k, k, True)

    @torch.jit.script
    def forked(q, k):
        return torch.jit.wait(torch.jit.fork(call, q, k))
    torch.manual_seed(11)
    q, k = torch.randn(1, 3, 8, 64), torch.randn(1, 30, 2, 64)
    expected = flashcpu.attention(q, k, k, causal=True)
    for out in both_kernels(compiled, lambda: forked(q, k)):
        assert torch.equal(out, expected)


def test_attention_paged_on_both_kernels(compiled):
    torch.manual_seed(12)
    k_cache = torch.randn(6, 16, 2, 64, dtype=torch.bfloat16)
    v_cache = torch.randn(6, 16, 2, 64, dtype=torch.bfloat16)
    kv = flashcpu.PagedKV(k_cache, v_cache)
    plan = flashcpu.Plan([0, 3, 4], [40, 20], [[5, 2, 4], [2, 5, 0]], num_heads=8, kv=kv)
    named = plan.as_tensor()
    q = torch.randn(4, 8, 64, dtype=torch.bfloat16)
    sinks = torch.linspace(-1, 1, 8)
    for options in ({"causal": True}, {"causal": True, "sinks": sinks},
                    {"window_left": 5, "softcap": 10.0, "scale": 0.1}):
        expected = flashcpu.attention_paged(
            q, kv, plan, causal=options.get("causal", False),
            window=(options.get("window_left", -1), -1), softcap=options.get("softcap", 0.0),
            scale=options.get("scale"), sinks=options.get("sinks"))
        for out in both_kernels(compiled, lambda: torch.ops.flashcpu.attention_paged(
                q, k_cache, v_cache, named, "nhd", **options)):
            assert torch.equal(bits(out), bits(expected))
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        torch.ops.flashcpu.attention_paged(q, k_cache, v_cache, named, "nhd", True)
    finally:
        sys.setprofile(None)
    assert "_attention_paged" not in called and "_plan_handles" in called
    # A plan tensor that names no plan, and a closed plan: the same errors.
    for plan_tensor in (torch.tensor([10 ** 9]), named):
        if plan_tensor is named:
            plan.close()
        in_cpp, in_python = both_kernels(compiled, lambda: _error(
            lambda: torch.ops.flashcpu.attention_paged(q, k_cache, v_cache, plan_tensor)))
        assert in_cpp == in_python and issubclass(in_cpp[0], flashcpu.InvalidArgumentError)
