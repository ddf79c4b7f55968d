"""Paths of the runtime libraries that compiled code calls (resolved at compile time).

A :class:`~mlc_mlir.target.Target` names them (``c_runner_utils``, ``omp``, ``cuda_runtime``);
this module finds the files: MLIR's runtime libraries in the ``xtc-mlir-python-bindings`` wheel,
LLVM's OpenMP runtime in the ``cmeel-libomp`` wheel.
"""

from __future__ import annotations

import glob
import os
import site
import sys
from typing import Tuple

from .._mlir import MLIR_LIB_DIR
from ..errors import PipelineError
from ..target import Target


def libomp_path() -> str:
    """Path of LLVM's OpenMP runtime from the ``cmeel-libomp`` wheel (``__kmpc_*`` symbols).

    Raises
    ------
    PipelineError
        If the wheel is not installed (searched in the site-packages folders and on
        ``sys.path``, which holds a ``pip install --target`` folder named by ``PYTHONPATH``).
    """
    for sp in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
        hits = glob.glob(os.path.join(sp, "cmeel.prefix", "lib", "libomp.so*"))
        if hits:
            return sorted(hits)[0]
    raise PipelineError("runtime: libomp.so not found; install the cmeel-libomp wheel "
                        "(pip install cmeel-libomp)")


def runtime_library_paths(target: Target) -> Tuple[str, ...]:
    """Absolute paths of ``target``'s runtime libraries.

    Raises
    ------
    PipelineError
        If one is missing (names the file and the wheel that ships it).
    """
    out = []
    for lib in target.runtime_libs:
        if lib == "omp":
            out.append(libomp_path())
            continue
        path = os.path.join(MLIR_LIB_DIR, f"libmlir_{lib}.so")
        if not os.path.isfile(path):
            raise PipelineError(f"runtime: {path} not found; reinstall xtc-mlir-python-bindings")
        out.append(path)
    return tuple(out)
