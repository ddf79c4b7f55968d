"""LLVM command-line options of this process: the ones LLVM's code generator reads
(:data:`mlc_mlir.runtime.jit_engine.LLVM_CODEGEN_OPTIONS`) and MLIR's printer options, set
through LLVM-C's ``LLVMParseCommandLineOptions`` in the LLVM library that MLIR's C API links.

:func:`printing_assumes_verified` turns MLIR's ``--mlir-print-assume-verified`` on for a block.
By default MLIR verifies an op before printing it (``verifyOpAndAdjustFlags``: an op that fails
to verify is printed in the generic form), and some transform ops print ops eagerly:
``transform.structured.fuse_into_containing_op`` builds its "could not fuse <producer> into
<containing op>" remark before each fusion, whether or not the fusion fails, so every fusion
verified and printed the whole containing loop. On DenseNet-121's default schedules that was a
third of the ``schedule`` stage (6.4 -> 4.2 CPU s on znver3, the same scheduled module;
``benchmarks/results/compile_cpu_2026-11-27_znver3_dense-compile3.txt``). The printer's
command-line options exist only once ``mlir::registerAsmPrinterCLOptions()`` has run, which
the Python bindings do not call: :func:`_asm_printer_options` calls it (a C++ symbol of the C
API library, through ``ctypes``).

Source: LLVM-C's ``LLVMParseCommandLineOptions`` (llvmlite's ``llvm.set_option``); MLIR's
``OpPrintingFlags`` (``--mlir-print-assume-verified``, read by its default constructor once the
options are registered).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from typing import Iterator, Optional, Sequence

from .._mlir import MLIR_CAPI_LIBRARY

#: ``mlir::registerAsmPrinterCLOptions()`` (Itanium mangling), exported by the C API library.
_REGISTER_ASM_PRINTER_OPTIONS = "_ZN4mlir27registerAsmPrinterCLOptionsEv"


@functools.lru_cache(maxsize=1)
def capi_library() -> Optional[ctypes.CDLL]:
    """MLIR's C API library (``MLIR_CAPI_LIBRARY``: the MLIR and LLVM of the bindings) loaded
    once per process through ``ctypes``, or None where it cannot be loaded."""
    try:
        return ctypes.CDLL(MLIR_CAPI_LIBRARY)
    except OSError:
        return None


def set_llvm_options(options: Sequence[str]) -> bool:
    """Parse ``options`` (``"-name=value"`` strings) as LLVM command-line options of this
    process: they hold for everything LLVM and MLIR do later in it. Returns whether it was
    possible (False where the C API library or ``LLVMParseCommandLineOptions`` is missing). An
    unknown option is ignored (LLVM reports parse errors to a null stream and does not exit)."""
    lib = capi_library()
    parse = getattr(lib, "LLVMParseCommandLineOptions", None) if lib is not None else None
    if parse is None:
        return False
    parse.restype = None
    parse.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p]
    argv = [b"mlc_mlir"] + [o.encode() for o in options]
    parse(len(argv), (ctypes.c_char_p * len(argv))(*argv), None)
    return True


@functools.lru_cache(maxsize=1)
def _asm_printer_options() -> bool:
    """Register MLIR's printer options (``--mlir-print-*``) once per process; whether they are."""
    register = getattr(capi_library(), _REGISTER_ASM_PRINTER_OPTIONS, None) if capi_library() else None
    if register is None:
        return False
    register.restype = None
    register.argtypes = []
    register()
    return True


_lock = threading.Lock()
_depth = 0


@contextlib.contextmanager
def printing_assumes_verified() -> Iterator[bool]:
    """Within the block, MLIR prints ops without verifying them first
    (``--mlir-print-assume-verified``; see the module docstring); yields whether the option
    could be set (False: MLIR verifies as before). Nested blocks keep it on until the outermost
    one ends. Use it around work on IR that verifies (the transform interpreter on a verified
    payload): an op that does not verify would be printed in its custom form."""
    global _depth
    if not _asm_printer_options():
        yield False
        return
    with _lock:
        _depth += 1
        ok = _depth > 1 or set_llvm_options(("--mlir-print-assume-verified=true",))
    try:
        yield ok
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                set_llvm_options(("--mlir-print-assume-verified=false",))
