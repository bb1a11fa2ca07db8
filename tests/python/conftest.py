"""The Python tests import flashcpu from python/ and reference.py from here;
the library comes from FLASHCPU_LIBRARY, else the build folder."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
# flashcpu.native's builds in a folder of the run's own: the tests take the
# ctypes path unless test_native.py builds the extension there.
if not os.environ.get("FLASHCPU_NATIVE_DIR"):
    import tempfile
    os.environ["FLASHCPU_NATIVE_DIR"] = tempfile.mkdtemp(prefix="flashcpu-native-")
if not os.environ.get("FLASHCPU_LIBRARY"):
    built = os.path.join(os.environ.get("FLASHCPU_BUILD_DIR", os.path.join(ROOT, "build")),
                         "src", "libflashcpu.so")
    if os.path.exists(built):
        os.environ["FLASHCPU_LIBRARY"] = built
