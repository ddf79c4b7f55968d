"""Runtime: :class:`Executable` (numpy in, numpy out), memref marshalling, AOT libraries."""

from .executable import BenchmarkResult, Executable, Function  # noqa: F401
from .aot import export_library, load_library  # noqa: F401
