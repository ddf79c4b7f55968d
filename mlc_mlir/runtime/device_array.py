"""Arrays in GPU memory, kept there between calls (TVM's ``tvm.nd.array(x, tvm.cuda())``).

:class:`DeviceArray` owns a ``cuMemAlloc`` buffer of the CUDA driver's primary context on
device 0 -- the context ``libmlir_cuda_runtime.so`` launches kernels in and PyTorch and CuPy
use -- so its pointer can be passed to compiled kernels and shared with those libraries without
a copy. Interchange goes through ``__cuda_array_interface__`` (version 3, Numba's protocol):
``torch.as_tensor(arr, device="cuda")`` and ``cupy.asarray(arr)`` view a :class:`DeviceArray`,
and :func:`as_device_array` views a CUDA ``torch.Tensor`` or CuPy array (anything exposing the
protocol). The driver is called through ``ctypes``; every call names its CUresult on failure.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional, Tuple

import numpy as np

from ..errors import ExecutionError, format_shape
from .cuda import DEVICE_ALIGNMENT, DRIVER, require_cuda
from .memref import contiguous_strides, out_array_problem


class _Driver:
    """``libcuda`` with the primary context of device 0 retained (pushed around each call)."""

    def __init__(self):
        require_cuda("a DeviceArray")
        self.lib = ctypes.CDLL(DRIVER)
        dev = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
                   "cuDevicePrimaryCtxRetain")

    @staticmethod
    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise ExecutionError(f"cuda: {what} failed with CUresult {rc}")

    def call(self, name: str, *args) -> None:
        """Run driver function ``name`` with the primary context current."""
        self.check(self.lib.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        try:
            self.check(getattr(self.lib, name)(*args), name)
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


@functools.lru_cache(maxsize=1)
def driver() -> _Driver:
    """The process's driver handle (created on first use).

    Raises
    ------
    ExecutionError
        Without a CUDA driver or device (:func:`mlc_mlir.runtime.cuda.require_cuda`).
    """
    return _Driver()


def synchronize() -> None:
    """Wait for all work of the primary context (``cuCtxSynchronize``): call before kernels read
    memory another library (PyTorch, CuPy) may still be writing on its own stream."""
    driver().call("cuCtxSynchronize")


class DeviceArray:
    """A C-contiguous array in GPU memory.

    Create one with :meth:`empty`, :meth:`from_numpy` or :func:`as_device_array`; read it back
    with :meth:`numpy`. Returned by :meth:`mlc_mlir.runtime.executable.Function.on_device`.

    Parameters
    ----------
    ptr : int
        Device address of the first element.
    shape : tuple of int
    dtype : numpy.dtype
    owner : object, optional
        What keeps the memory alive (a foreign tensor); None when this array owns a
        ``cuMemAlloc`` buffer, freed when the array is collected.
    """

    def __init__(self, ptr: int, shape: Tuple[int, ...], dtype, owner=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._owner = owner

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @classmethod
    def empty(cls, shape, dtype) -> "DeviceArray":
        """Uninitialized device memory (``cuMemAlloc``).

        Raises
        ------
        ExecutionError
            Without a GPU, or when the allocation fails (out of memory: CUresult 2).
        """
        d = driver()
        arr = cls(0, shape, dtype)
        ptr = ctypes.c_uint64(0)
        d.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(arr.nbytes, 1)))
        arr.ptr = ptr.value
        arr._free = d
        return arr

    @classmethod
    def from_numpy(cls, a: np.ndarray) -> "DeviceArray":
        """A device copy of ``a`` (``cuMemcpyHtoD``; a non-contiguous ``a`` is made contiguous)."""
        a = np.ascontiguousarray(a)
        arr = cls.empty(a.shape, a.dtype)
        driver().call("cuMemcpyHtoD_v2", ctypes.c_uint64(arr.ptr), a.ctypes.data_as(ctypes.c_void_p),
                      ctypes.c_size_t(arr.nbytes))
        return arr

    def numpy(self, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Copy to host memory (``cuMemcpyDtoH``); into ``out`` when given (same shape and dtype,
        C-contiguous, writable).

        Raises
        ------
        ExecutionError
            If ``out`` does not match.
        """
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out_array_problem(out, self.dtype, self.shape):
            raise ExecutionError(f"DeviceArray.numpy: out {out_array_problem(out, self.dtype, self.shape)}")
        if self._owner is not None:
            synchronize()
        driver().call("cuMemcpyDtoH_v2", out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(self.ptr),
                      ctypes.c_size_t(self.nbytes))
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        """Numba's CUDA array interface, version 3 (read by PyTorch, CuPy, Numba)."""
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def __del__(self):
        free = getattr(self, "_free", None)
        if free is not None and self.ptr:
            try:
                free.call("cuMemFree_v2", ctypes.c_uint64(self.ptr))
            except Exception:   # interpreter shutdown: the driver may be gone already
                pass
            self.ptr = 0

    def __repr__(self) -> str:
        return f"<mlc.DeviceArray {self.dtype}{format_shape(self.shape)} at 0x{self.ptr:x}>"


def as_device_array(x) -> DeviceArray:
    """View ``x`` as a :class:`DeviceArray` without copying: a DeviceArray is returned as is,
    an object with ``__cuda_array_interface__`` (a CUDA ``torch.Tensor``, a CuPy array) is
    wrapped (kept alive by the view).

    Raises
    ------
    ExecutionError
        If ``x`` is neither, is not C-contiguous (its strides are named), or its data pointer
        is not a multiple of ``DEVICE_ALIGNMENT`` (16) bytes: compiled kernels assume their
        buffers start there (``ld.global.v4``), a view at an odd element offset must be copied
        (``.clone()``).
    """
    if isinstance(x, DeviceArray):
        return x
    desc = getattr(x, "__cuda_array_interface__", None)
    if desc is None:
        raise ExecutionError(f"device call: {type(x).__name__} is not in GPU memory; expected a "
                             "DeviceArray or an object with __cuda_array_interface__ (a CUDA "
                             "torch.Tensor, a CuPy array)")
    shape, dtype = tuple(desc["shape"]), np.dtype(desc["typestr"])
    strides = desc.get("strides")
    if strides is not None:
        expected = contiguous_strides(shape, dtype.itemsize)
        if tuple(strides) != expected and int(np.prod(shape)) > 1:
            raise ExecutionError(f"device call: a {type(x).__name__} with strides {tuple(strides)} "
                                 f"(bytes); expected C-contiguous {tuple(expected)} (.contiguous())")
    ptr = int(desc["data"][0])
    if ptr % DEVICE_ALIGNMENT:
        raise ExecutionError(f"device call: a {type(x).__name__} whose data starts at {ptr:#x}, not a "
                             f"multiple of {DEVICE_ALIGNMENT} bytes (a view at an element offset); "
                             "compiled kernels load 16-byte vectors: pass a copy (.clone())")
    return DeviceArray(ptr, shape, dtype, owner=x)
