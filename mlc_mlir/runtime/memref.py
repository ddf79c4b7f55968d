"""Marshalling numpy arrays to MLIR's C memref descriptors (``StridedMemRefType``).

A descriptor is ``{allocated, aligned, offset, sizes[rank], strides[rank]}`` (the layout of
``mlir/ExecutionEngine/CRunnerUtils.h``). Descriptors are built once per function argument; a
call only rewrites the two data pointers, so no input is copied and the per-call cost is a few
field stores.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import numpy as np

from ..errors import format_shape


def out_array_problem(o, dtype, shape) -> Optional[str]:
    """Why ``o`` cannot receive a result of ``dtype`` and ``shape``: the first property that
    fails (type, dtype, shape, writable, C-contiguous), phrased to follow "out array ... ";
    None when it can."""
    if not isinstance(o, np.ndarray):
        return f"is a {type(o).__name__}; expected a numpy.ndarray"
    if o.dtype != dtype:
        return f"has dtype {o.dtype}; expected {np.dtype(dtype)}"
    if o.shape != tuple(shape):
        return f"has shape {format_shape(o.shape)}; expected {format_shape(shape)}"
    if not o.flags.writeable:
        return "is read-only (flags.writeable is False); expected a writable array"
    if not o.flags.c_contiguous:
        return (f"is not C-contiguous (strides {o.strides}); expected a C-contiguous array such as "
                "numpy.empty(shape, dtype)")
    return None


#: A zero-length ctypes array type: ``from_buffer`` of it views any writable buffer.
_VIEW = ctypes.c_char * 0


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s first element. A writable array's comes from a ctypes view of
    its buffer (``from_buffer``, a few hundred nanoseconds: the per-call cost of a small
    function); a read-only one's, and one whose dtype the buffer protocol cannot export
    (``ml_dtypes.bfloat16``), from ``a.ctypes.data`` (several times slower)."""
    if a.flags.writeable and a.dtype.isbuiltin == 1:
        return ctypes.addressof(_VIEW.from_buffer(a))
    return a.ctypes.data


@functools.lru_cache(maxsize=None)
def descriptor_type(rank: int) -> type:
    """The ctypes Structure of a rank-``rank`` memref descriptor."""
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_longlong)]
    if rank > 0:
        fields += [("sizes", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type(f"MemRefDescriptor{rank}", (ctypes.Structure,), {"_fields_": fields})


def make_descriptor(shape) -> ctypes.Structure:
    """A descriptor for a C-contiguous array of ``shape`` (data pointers left null; a
    non-int dim, a symbolic size, leaves sizes and strides for :meth:`PackedArgs.bind`)."""
    rank = len(shape)
    desc = descriptor_type(rank)()
    desc.offset = 0
    if rank and all(isinstance(d, (int, np.integer)) for d in shape):
        strides = np.ones(rank, dtype=np.int64)
        for i in range(rank - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        for i, d in enumerate(shape):
            desc.sizes[i] = int(d)
            desc.strides[i] = int(strides[i])
    return desc


class PackedArgs:
    """Argument block for one function: one descriptor per memref argument (inputs, then outputs).

    ``packed`` is the ``void**`` array expected by the ExecutionEngine's packed wrapper
    (``_mlir__mlir_ciface_<name>``); ``pointers`` holds each descriptor's address, the arguments
    of the plain C interface (``_mlir_ciface_<name>``) used by AOT libraries.
    """

    def __init__(self, shapes, dynamic: bool = False):
        self.dynamic = dynamic
        self.descriptors = [make_descriptor(s) for s in shapes]
        self.pointers = [ctypes.c_void_p(ctypes.addressof(d)) for d in self.descriptors]
        self.packed = (ctypes.c_void_p * len(shapes))(
            *[ctypes.addressof(p) for p in self.pointers])

    def bind(self, arrays) -> None:
        """Point the descriptors at ``arrays`` (C-contiguous, shapes as declared); for a
        function with symbolic sizes (``dynamic``) also write each array's sizes and strides."""
        for d, a in zip(self.descriptors, arrays):
            ptr = data_address(a)
            d.allocated = ptr
            d.aligned = ptr
            if self.dynamic and a.ndim:
                step = a.itemsize
                for i, (n, st) in enumerate(zip(a.shape, a.strides)):
                    d.sizes[i] = n
                    d.strides[i] = st // step

    def bind_pointers(self, pointers) -> None:
        """Point the descriptors at raw addresses (device memory: ``DeviceArray.ptr``)."""
        for d, ptr in zip(self.descriptors, pointers):
            d.allocated = ptr
            d.aligned = ptr
