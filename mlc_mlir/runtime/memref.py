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
from ..target import CACHE_LINE_BYTES


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


def _data_field_offset() -> Optional[int]:
    """The offset of ``data`` in an ndarray object (NumPy's ``PyArrayObject_fields``: the
    pointer follows ``PyObject_HEAD``, ``object.__basicsize__`` bytes), or None when probe
    arrays do not confirm it (another Python or NumPy layout)."""
    off = object.__basicsize__
    probes = [np.empty(3, np.float32), np.zeros((2, 5), np.int8)[:, 1:], np.arange(4.0)[::2]]
    for p in probes:
        if ctypes.c_void_p.from_address(id(p) + off).value != p.__array_interface__["data"][0]:
            return None
    return off


#: Where an ndarray object keeps its data pointer (None: read it through the buffer protocol).
_DATA_OFFSET = _data_field_offset()
_read_pointer = ctypes.c_void_p.from_address


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s first element, read from the array object's ``data`` field
    (``PyArray_DATA``: ``id(a)`` is the object's address in CPython; the field's offset is
    checked on probe arrays at import). Where the check failed: a writable array's address
    from a ctypes view of its buffer (``from_buffer``), a read-only one's, and one whose dtype
    the buffer protocol cannot export (``ml_dtypes.bfloat16``), from ``a.ctypes.data``."""
    if _DATA_OFFSET is not None:
        return _read_pointer(id(a) + _DATA_OFFSET).value or 0
    if a.flags.writeable and a.dtype.isbuiltin == 1:
        return ctypes.addressof(_VIEW.from_buffer(a))
    return a.ctypes.data


#: Results of at least this many bytes are allocated cache-line aligned (:func:`empty_result`):
#: the extra ~1.5 us of the aligned allocation is under 2% of the time to write them.
ALIGNED_RESULT_BYTES = 4 << 20

#: The alignment of large results, bytes: a cache line, which a non-temporal vector store of
#: a whole line needs (``vmovntps`` of a zmm register).
RESULT_ALIGNMENT = CACHE_LINE_BYTES

_U8 = np.dtype(np.uint8)


def empty_result(shape, dtype: np.dtype) -> np.ndarray:
    """A new C-contiguous array for a result of ``shape`` and ``dtype`` (a numpy dtype):
    ``numpy.empty``, whose buffer glibc aligns to 16 bytes, or for one of
    :data:`ALIGNED_RESULT_BYTES` or more a view of a slightly larger byte buffer that starts at a
    multiple of :data:`RESULT_ALIGNMENT` (numpy's own ``empty`` takes no alignment), so that the
    non-temporal stores of compiled code (:mod:`mlc_mlir.pipeline.nontemporal`) apply to it.
    The view keeps the buffer alive (``base``); it is writable and owns no other data."""
    n = dtype.itemsize
    for d in shape:
        n *= d
    if n < ALIGNED_RESULT_BYTES:
        return np.empty(shape, dtype)
    buf = np.empty(n + RESULT_ALIGNMENT, _U8)
    return np.ndarray(shape, dtype, buf, -data_address(buf) % RESULT_ALIGNMENT)


@functools.lru_cache(maxsize=None)
def descriptor_type(rank: int) -> type:
    """The ctypes Structure of a rank-``rank`` memref descriptor."""
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_longlong)]
    if rank > 0:
        fields += [("sizes", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type(f"MemRefDescriptor{rank}", (ctypes.Structure,), {"_fields_": fields})


def contiguous_strides(shape, itemsize: int = 1) -> tuple:
    """The strides of a C-contiguous array of ``shape`` in units of ``itemsize`` (bytes for an
    element's size, elements for 1): numpy's ``strides`` of ``numpy.empty(shape, dtype)``."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= int(d)
    return tuple(reversed(strides))


def make_descriptor(shape) -> ctypes.Structure:
    """A descriptor for a C-contiguous array of ``shape`` (data pointers left null; a
    non-int dim, a symbolic size, leaves sizes and strides for :meth:`PackedArgs.bind`)."""
    rank = len(shape)
    desc = descriptor_type(rank)()
    desc.offset = 0
    if rank and all(isinstance(d, (int, np.integer)) for d in shape):
        for i, (d, st) in enumerate(zip(shape, contiguous_strides(shape))):
            desc.sizes[i] = int(d)
            desc.strides[i] = st
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
        if not self.dynamic:
            for d, a in zip(self.descriptors, arrays):
                d.allocated = d.aligned = data_address(a)
            return
        for d, a in zip(self.descriptors, arrays):
            d.allocated = d.aligned = data_address(a)
            if a.ndim:
                step = a.itemsize
                for i, (n, st) in enumerate(zip(a.shape, a.strides)):
                    d.sizes[i] = n
                    d.strides[i] = st // step

    def bind_pointers(self, pointers) -> None:
        """Point the descriptors at raw addresses (device memory: ``DeviceArray.ptr``)."""
        for d, ptr in zip(self.descriptors, pointers):
            d.allocated = ptr
            d.aligned = ptr
