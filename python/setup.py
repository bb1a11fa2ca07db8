"""pip install ./python: the flashcpu Python package (ctypes over the shared
library; the C++ extension's sources go with it, compiled only when
flashcpu.native.build() is called). A setup.py rather than a pyproject.toml so
that pip builds it with the installed setuptools, offline (a pyproject.toml
makes pip fetch setuptools into an isolated build environment).

When the repository's build folder holds the library (the README's set-up
builds it in build/, or set FLASHCPU_BUILD_DIR), it is copied into the
package, which then needs no FLASHCPU_LIBRARY."""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_library(build_py):  # noqa: N801 (setuptools' naming)
    def run(self):
        super().run()
        build = os.environ.get("FLASHCPU_BUILD_DIR", os.path.join(HERE, "..", "build"))
        found = sorted(glob.glob(os.path.join(build, "src", "libflashcpu.so.*.*.*")))
        if found:
            target = os.path.join(self.build_lib, "flashcpu", "libflashcpu.so")
            shutil.copyfile(os.path.realpath(found[-1]), target)
            print(f"flashcpu: packaging {found[-1]}")


setup(
    name="flashcpu",
    version="0.3.0",
    description="Exact attention (FlashAttention) on multicore CPUs: Python bindings",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=["flashcpu"],
    # The extension's sources: flashcpu.native.build() compiles them where
    # the package is installed.
    package_data={"flashcpu": ["libflashcpu.so*", "_native_attention.cpp", "_native_package.h",
                               "_native_backend.h", "_native_op.h"]},
    cmdclass={"build_py": build_py_with_library},
)
