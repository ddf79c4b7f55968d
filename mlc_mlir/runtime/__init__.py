"""Runtime: :class:`Executable` (numpy in, numpy out), memref marshalling, loading AOT libraries,
and the registry of Python kernels. It never compiles (TVM's runtime/compiler split)."""

from .device_array import DeviceArray, as_device_array  # noqa: F401
from .executable import BenchmarkResult, Executable, Function  # noqa: F401
from .library import load_library  # noqa: F401
