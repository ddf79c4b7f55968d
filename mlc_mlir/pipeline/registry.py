"""Named lowering pipelines: the files in ``pipelines/`` (mlir-opt ``--pass-pipeline`` syntax).

A pipeline is referred to by name (``"cpu"`` -> ``pipelines/cpu.pipeline``) or by a path. The
file's text is used verbatim, so ``mlir-opt --pass-pipeline="$(cat pipelines/cpu.pipeline)"``
runs exactly what :func:`mlc_mlir.compile` runs.

``cpu.pipeline`` runs the two dialect conversions that accept it, ``convert-scf-to-cf`` and
``convert-to-llvm``, with ``allow-pattern-rollback=false`` (MLIR's conversion driver then does
not log each rewrite in order to undo it; upstream still calls the flag experimental, and a
pattern that failed after rewriting would leave IR that the verification at the end of the
pipeline piece rejects). The output is the same LLVM dialect, op for op, in less compile time
(``benchmarks/results/compile_cpu_2026-11-27_znver3_dense-compile3.txt``).
"""

from __future__ import annotations

import os
from typing import List

from .._data import PIPELINES_DIR
from ..errors import PipelineError


def available() -> List[str]:
    """Names of the pipelines in ``pipelines/``."""
    if not os.path.isdir(PIPELINES_DIR):
        return []
    return sorted(f[: -len(".pipeline")] for f in os.listdir(PIPELINES_DIR) if f.endswith(".pipeline"))


def pipeline_path(name_or_path: str) -> str:
    """Path of a pipeline given by name or path.

    Raises
    ------
    PipelineError
        If neither a file ``name_or_path`` nor ``pipelines/<name>.pipeline`` exists.
    """
    if os.path.isfile(name_or_path):
        return name_or_path
    path = os.path.join(PIPELINES_DIR, f"{name_or_path}.pipeline")
    if os.path.isfile(path):
        return path
    raise PipelineError(f"pipeline: no pipeline named '{name_or_path}'; available: {available()} "
                        f"(or pass a path to a .pipeline file)")


def load_pipeline(name_or_path: str) -> str:
    """The pass-pipeline text of a named pipeline or pipeline file (whitespace kept)."""
    with open(pipeline_path(name_or_path)) as f:
        return f.read().strip()
