"""Registered kernels callable from compiled code (TVM's ``register_func`` / Relax
``call_dps_packed``): Python callables in destination-passing style, and native library
providers (OpenBLAS ``sgemm`` from the ``scipy-openblas32`` wheel).

A Python kernel receives numpy views of its inputs and of the output buffer (no copies) and
writes the output in place::

    @mlc.register_func("env.relu")
    def relu(x, out):
        np.maximum(x, 0, out=out)

The compiled code reaches it through a ``ctypes`` callback registered with the
ExecutionEngine; OpenBLAS is called directly from the JIT code, with no Python in the loop.
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable, Dict, Sequence, Tuple

import numpy as np
import scipy_openblas32

from ..errors import ExecutionError
from ..ir import dtypes

#: name -> Python callable (destination-passing: inputs..., out).
_FUNCS: Dict[str, Callable] = {}

#: Native providers: name -> C symbol in a shared library (see :func:`library_path`).
NATIVE = {"openblas.sgemm": "scipy_cblas_sgemm"}


def register_func(name: str, fn: Callable = None, override: bool = False):
    """Register ``fn`` under ``name`` (usable as a decorator). ``env.*`` names are the
    convention for Python kernels.

    Raises
    ------
    ExecutionError
        If ``name`` is taken (and ``override`` is False) or names a native provider.
    """
    def deco(f):
        if name in NATIVE:
            raise ExecutionError(f"register_func: '{name}' is a native library kernel")
        if name in _FUNCS and not override:
            raise ExecutionError(f"register_func: '{name}' is already registered (override=True "
                                 "replaces it)")
        if not callable(f):
            raise ExecutionError(f"register_func: '{name}' must be callable, got {type(f).__name__}")
        _FUNCS[name] = f
        return f

    return deco(fn) if fn is not None else deco


def get_func(name: str) -> Callable:
    """The Python kernel registered as ``name``.

    Raises
    ------
    ExecutionError
        If nothing is registered under ``name`` (lists what is).
    """
    try:
        return _FUNCS[name]
    except KeyError:
        raise ExecutionError(f"no kernel registered as '{name}'; registered: {sorted(_FUNCS)}, "
                             f"native: {sorted(NATIVE)}") from None


def registered_names() -> list:
    """Sorted names of the registered Python kernels (native providers are in :data:`NATIVE`)."""
    return sorted(_FUNCS)


def is_known(name: str) -> bool:
    """True if ``name`` is a registered Python kernel or a native provider."""
    return name in _FUNCS or name in NATIVE


def library_path(name: str) -> str:
    """Shared library that defines native provider ``name``."""
    if name.startswith("openblas."):
        return os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    raise ExecutionError(f"no native library for '{name}'")


def make_callback(name: str, specs: Sequence[Tuple[Tuple[int, ...], str]], errors: list):
    """A ctypes function for ``_mlir_ciface_<sym>``: one memref-descriptor pointer per argument
    (inputs, then the output), wrapped as numpy views of ``specs`` ((shape, dtype) each).

    An exception in the kernel cannot cross the C frames: it is appended to ``errors`` and the
    caller (the Executable) raises it after the native call returns."""
    fn = get_func(name)
    views = []
    for shape, dt in specs:
        views.append((tuple(shape), dtypes.to_numpy_dtype(dt)))
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(specs)))

    def call(*desc_ptrs):
        arrays = []
        for p, (shape, npd) in zip(desc_ptrs, views):
            # descriptor: {allocated, aligned, offset, sizes..., strides...}
            words = ctypes.cast(p, ctypes.POINTER(ctypes.c_int64))
            aligned, offset = words[1], words[2]
            n = int(np.prod(shape)) if shape else 1
            buf = (ctypes.c_char * (n * npd.itemsize)).from_address(aligned + offset * npd.itemsize)
            arrays.append(np.frombuffer(buf, dtype=npd).reshape(shape))
        try:
            fn(*arrays)
        except BaseException as e:  # noqa: BLE001 - re-raised by the Executable
            errors.append((name, e))

    return proto(call)
