"""pip install ./python: the flashcpu Python package (ctypes over the shared
library, no compiled extension). A setup.py rather than a pyproject.toml so
that pip builds it with the installed setuptools, offline (a pyproject.toml
makes pip fetch setuptools into an isolated build environment)."""

from setuptools import setup

setup(
    name="flashcpu",
    version="0.2.0",
    description="Exact attention (FlashAttention) on multicore CPUs: Python bindings",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=["flashcpu"],
    # A library copied next to the package before pip install goes with it.
    package_data={"flashcpu": ["libflashcpu.so*"]},
)
