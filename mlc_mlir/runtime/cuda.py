"""The CUDA driver, probed before anything loads ``libmlir_cuda_runtime.so``.

Creating an ExecutionEngine with MLIR's CUDA runtime wrappers where ``libcuda.so.1`` (the
driver) is missing, or where no device answers, aborts the process on the first call instead of
raising. :func:`require_cuda` checks the driver with ``ctypes`` first (``cuInit``,
``cuDeviceGetCount``) and raises a clear :class:`~mlc_mlir.errors.ExecutionError` instead
(TVM's ``tvm.cuda().exist``, PyTorch's ``torch.cuda.is_available``).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

from ..errors import ExecutionError

#: The driver library the runtime wrappers link against.
DRIVER = "libcuda.so.1"

#: A compiled CUDA function ``f`` (numpy memory in and out: copies to and from the GPU) comes
#: with ``f + DEVICE_SUFFIX``, the same kernels on device buffers (no copies), called by
#: :meth:`mlc_mlir.runtime.executable.Function.on_device`.
DEVICE_SUFFIX = "__device"

#: Bytes every device buffer a compiled kernel receives is aligned to (``cuMemAlloc`` returns
#: 256-byte aligned memory; the kernels assume 16, a ``ld.global.v4``).
DEVICE_ALIGNMENT = 16


@functools.lru_cache(maxsize=1)
def driver_problem() -> Optional[str]:
    """Why CUDA code cannot run here, or None when a driver and at least one device answer."""
    try:
        lib = ctypes.CDLL(DRIVER)
    except OSError as e:
        return f"{DRIVER} cannot be loaded ({e}): no NVIDIA driver on this machine"
    rc = lib.cuInit(0)
    if rc != 0:
        return f"cuInit failed with CUresult {rc} (driver present, no usable GPU?)"
    n = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(n))
    if rc != 0 or n.value < 1:
        return f"no CUDA device (cuDeviceGetCount: CUresult {rc}, {n.value} devices)"
    return None


def cuda_available() -> bool:
    """Whether CUDA code compiled by mlc-mlir can run in this process."""
    return driver_problem() is None


def require_cuda(what: str = "running CUDA code") -> None:
    """Raise unless :func:`cuda_available`.

    Raises
    ------
    ExecutionError
        ``<what> needs a GPU: libcuda.so.1 cannot be loaded ...`` (names the cause).
    """
    problem = driver_problem()
    if problem is not None:
        raise ExecutionError(f"cuda: {what} needs a GPU: {problem}. Compile to PTX without one "
                             "with mlc_mlir.pipeline.cuda.compile_to_ptx")
