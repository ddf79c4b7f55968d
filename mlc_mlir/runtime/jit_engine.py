"""Creating and initializing MLIR's ``ExecutionEngine`` with the GIL released, so that other
Python threads (the progress line of :func:`mlc_mlir.compile`) run while LLVM works.

The Python constructor ``ExecutionEngine(module, opt_level, shared_libs)`` (translation to LLVM
IR and LLVM's work up to code generation) and ``ExecutionEngine.initialize()`` (which
materializes the code to run the global constructors) hold the GIL, for minutes on a large
model. :func:`create_engine` makes the same engine by calling the C API function the
constructor calls, ``mlirExecutionEngineCreate`` of the wheel's ``libMLIRPythonCAPI.so``,
through ``ctypes`` (which releases the GIL around a foreign call), and wraps the result with
``ExecutionEngine._CAPICreate`` (the bindings' capsule interop): the engine is an object of
the bindings' class (:data:`NativeExecutionEngine`, without the pure-Python helpers
``lookup``/``invoke``/``register_runtime`` of ``mlir.execution_engine.ExecutionEngine``; use
``raw_lookup``/``raw_register_runtime``), which owns and destroys it; :func:`initialize_engine` calls
``mlirExecutionEngineInitialize`` the same way. Where the library or a symbol is missing, they
fall back to the bindings' methods.

LLVM's code generation runs with :data:`LLVM_CODEGEN_OPTIONS` (:func:`set_llvm_options`, set
before the process's first engine; ``export_library`` gives ``llc`` the same): the scheduling DAG of a basic block with
many memory operations is built with LLVM's compile-time cut-off from a smaller size than LLVM's
default (see the constant).

Source: MLIR's C API (``mlir-c/ExecutionEngine.h``) and the Python bindings' capsule protocol
(``mlir-c/Bindings/Python/Interop.h``); ``ctypes`` releasing the GIL for foreign calls; LLVM-C's
``LLVMParseCommandLineOptions`` (llvmlite's ``llvm.set_option``) for the code generator's options.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional, Sequence, Tuple

from .._mlir import ExecutionEngine, NativeExecutionEngine, ir
from ..errors import PipelineError
from ..ir import llvm_options

#: Capsule names of the bindings' interop protocol (``MLIR_PYTHON_CAPSULE_*``).
_MODULE_CAPSULE = b"mlir.ir.Module._CAPIPtr"
_ENGINE_CAPSULE = b"mlir.execution_engine.ExecutionEngine._CAPIPtr"

#: LLVM command-line options of every code generation (the JIT's, set in this process by
#: :func:`set_llvm_options`; ``llc``'s in :func:`mlc_mlir.pipeline.aot.export_library`).
#: ``-dag-maps-huge-region``: from how many pending memory operations LLVM's scheduling DAG
#: builder (``ScheduleDAGInstrs::buildSchedGraph``, used by the machine scheduler and the
#: post-RA scheduler) reduces its alias maps instead of adding a chain edge from each memory
#: operation to every earlier one it may alias. Both schedulers run on each basic block, so the
#: edges grow with the square of a block's memory operations; LLVM's default of 1000 lets
#: blocks of ~1000 stores through (LLVM fully unrolls the ``-inf`` border fill of a max pool's
#: padded buffer, 15x528 floats, into 990 vector stores), and on Inception v1 the two
#: schedulers were ~75% of ``llc -O2`` (18.6 CPU s; 7.7 s at 256, znver3). A kernel block of a
#: default schedule holds < 100 memory operations and is scheduled as before.
LLVM_CODEGEN_OPTIONS: Tuple[str, ...] = ("-dag-maps-huge-region=256",)


class _StringRef(ctypes.Structure):
    """``MlirStringRef``: a pointer and a length."""
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


@functools.lru_cache(maxsize=1)
def _capi() -> Optional[ctypes.CDLL]:
    """The C API library with ``mlirExecutionEngineCreate`` typed, or None if it is missing."""
    lib = llvm_options.capi_library()
    create = getattr(lib, "mlirExecutionEngineCreate", None) if lib is not None else None
    initialize = getattr(lib, "mlirExecutionEngineInitialize", None) if lib is not None else None
    if create is None or initialize is None:
        return None
    initialize.restype = None
    initialize.argtypes = [ctypes.c_void_p]
    # MlirExecutionEngine mlirExecutionEngineCreate(MlirModule op, int optLevel, int numPaths,
    #     const MlirStringRef *sharedLibPaths, bool enableObjectDump, bool enablePIC)
    create.restype = ctypes.c_void_p
    create.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_StringRef),
                       ctypes.c_bool, ctypes.c_bool]
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return lib


def set_llvm_options(options: Sequence[str] = LLVM_CODEGEN_OPTIONS) -> bool:
    """Set the LLVM command-line ``options`` (default :data:`LLVM_CODEGEN_OPTIONS`) in the LLVM
    library of this process (the one MLIR's C API links): they hold for every later code
    generation of the process. Returns whether it was possible (False where the C API library or
    LLVM-C's ``LLVMParseCommandLineOptions`` is missing: LLVM's defaults then stay;
    :func:`mlc_mlir.ir.llvm_options.set_llvm_options`)."""
    return llvm_options.set_llvm_options(options)


@functools.lru_cache(maxsize=1)
def _default_llvm_options() -> bool:
    """:func:`set_llvm_options` with the defaults, once per process (before the first engine)."""
    return set_llvm_options()


def create_engine(module: ir.Module, opt_level: int, shared_libs: Sequence[str]) -> NativeExecutionEngine:
    """``ExecutionEngine(module, opt_level=opt_level, shared_libs=shared_libs)`` (LLVM IR
    translation, LLVM's ``-O<opt_level>`` pipeline and code generation of ``module``, an MLIR
    module in the LLVM dialect), built with the GIL released and :data:`LLVM_CODEGEN_OPTIONS`
    (see the module docstring).

    Raises
    ------
    PipelineError
        ``jit: ExecutionEngine failed: ...`` if LLVM cannot compile or link the module (MLIR's
        diagnostics go to the context's handler).
    """
    _default_llvm_options()
    lib = _capi()
    if lib is None:
        try:
            return ExecutionEngine(module, opt_level=opt_level, shared_libs=list(shared_libs))
        except RuntimeError as e:
            raise PipelineError(f"jit: ExecutionEngine failed: {e}") from None
    paths = [p.encode() for p in shared_libs]
    refs = (_StringRef * max(len(paths), 1))(*[_StringRef(p, len(p)) for p in paths])
    module_ptr = ctypes.pythonapi.PyCapsule_GetPointer(module._CAPIPtr, _MODULE_CAPSULE)
    # the defaults of the Python constructor: object dump on (dump_to_object_file), no PIC
    engine = lib.mlirExecutionEngineCreate(module_ptr, opt_level, len(paths), refs, True, False)
    if not engine:
        raise PipelineError("jit: ExecutionEngine failed: Failure while creating the ExecutionEngine.")
    return ExecutionEngine._CAPICreate(ctypes.pythonapi.PyCapsule_New(engine, _ENGINE_CAPSULE, None))


def initialize_engine(engine: NativeExecutionEngine) -> None:
    """``engine.initialize()`` (runs the module's global constructors, compiling what they need)
    with the GIL released (see the module docstring)."""
    lib = _capi()
    if lib is None:
        engine.initialize()
        return
    lib.mlirExecutionEngineInitialize(ctypes.pythonapi.PyCapsule_GetPointer(engine._CAPIPtr, _ENGINE_CAPSULE))
