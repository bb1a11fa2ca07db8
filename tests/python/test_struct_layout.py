"""Every ctypes mirror of the Python package against the C struct it mirrors:
the same fields in the same order, at the same offsets, of the same sizes,
and the same struct size. The C side comes from flashcpu_struct_layout
(tests/python/struct_layout.c, built with the tests), whose list of fields
is checked against the header's declarations, so that a field added to the
header and to neither list fails here too."""
import ctypes
import os
import re
import subprocess

import pytest

from flashcpu import _library

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEADER = os.path.join(ROOT, "include", "flashcpu", "flashcpu.h")

# Every mirror, by the C struct it mirrors.
MIRRORS = {
    "flashcpu_tensor": _library.Tensor,
    "flashcpu_host_openmp": _library.HostOpenmp,
    "flashcpu_context_options": _library.ContextOptions,
    "flashcpu_tree_mask": _library.TreeMask,
    "flashcpu_additive_mask": _library.AdditiveMask,
    "flashcpu_kv_scales": _library.KvScales,
    "flashcpu_attention_params": _library.AttentionParams,
    "flashcpu_paged_kv": _library.PagedKV,
    "flashcpu_batch": _library.Batch,
    "flashcpu_kernel_info": _library.KernelInfo,
}


def _helper():
    """The flashcpu_struct_layout program of the build the tests use."""
    builds = []
    if os.environ.get("FLASHCPU_BUILD_DIR"):
        builds.append(os.environ["FLASHCPU_BUILD_DIR"])
    library = os.environ.get("FLASHCPU_LIBRARY")
    if library:  # BUILD/src/libflashcpu.so
        builds.append(os.path.dirname(os.path.dirname(os.path.abspath(library))))
    builds.append(os.path.join(ROOT, "build"))
    for build in builds:
        path = os.path.join(build, "tests", "flashcpu_struct_layout")
        if os.access(path, os.X_OK):
            return path
    return None


def c_layouts():
    """{struct: (size, [(field, offset, size), ...])} as C compiled them."""
    helper = _helper()
    if helper is None:
        pytest.skip("flashcpu_struct_layout is not built (it is built with the tests: "
                    "ninja -C build flashcpu_struct_layout)")
    layouts = {}
    for line in subprocess.run([helper], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, first, *rest = line.split()
        if first == "size":
            layouts[name] = (int(rest[0]), [])
        else:
            struct, field = name.split(".")
            layouts[struct][1].append((field, int(first), int(rest[0])))
    return layouts


def header_fields():
    """{struct: [field, ...]} as the header declares them."""
    with open(HEADER, encoding="utf-8") as header:
        text = header.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    structs = {}
    for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", text, flags=re.S):
        fields = []
        for declaration in body.split(";"):
            declaration = " ".join(declaration.split())
            if not declaration:
                continue
            pointer = re.match(r"[^(]*\(\s*\*\s*(\w+)\s*\)", declaration)
            if pointer:  # a function pointer: its parameters hold commas
                fields.append(pointer.group(1))
                continue
            for part in declaration.split(","):
                fields.append(re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", part.strip())[0])
        structs[name] = fields
    return structs


def test_every_header_struct_has_a_mirror_and_a_c_layout():
    declared = header_fields()
    assert set(declared) == set(MIRRORS)
    layouts = c_layouts()
    assert set(layouts) == set(MIRRORS)
    for struct, fields in declared.items():
        assert [f for f, _, _ in layouts[struct][1]] == fields, (
            f"tests/python/struct_layout.c lists other fields of {struct} than the header")


@pytest.mark.parametrize("struct", sorted(MIRRORS))
def test_mirror_matches_the_c_struct(struct):
    size, fields = c_layouts()[struct]
    mirror = MIRRORS[struct]
    names = [f[0] for f in mirror._fields_]
    assert names == [f for f, _, _ in fields], f"{mirror.__name__}'s fields"
    for field, offset, field_size in fields:
        described = getattr(mirror, field)
        assert (described.offset, described.size) == (offset, field_size), \
            f"{mirror.__name__}.{field}: offset, size"
    assert ctypes.sizeof(mirror) == size, f"sizeof {mirror.__name__}"
