"""CUDA lowering without a GPU: a scheduled module (``bind``) to PTX, checked by ``ptxas``.

``pipelines/cuda.pipeline`` bufferizes, maps the bound ``scf.forall`` nests to the grid and the
thread block (``gpu-map-parallel-loops``, ``convert-parallel-loops-to-gpu``), outlines kernels and
runs ``gpu-lower-to-nvvm-pipeline{cubin-format=isa}``; the PTX is read from the ``gpu.binary``
ops. Running it needs ``libcuda`` (not present on CI machines).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Dict

from .._mlir import gpu_d, ir
from ..errors import PipelineError
from ..ir.module import Module
from ..ir.walk import find_ops
from .compile import lower


def compile_to_ptx(module: Module, pipeline: str = "cuda") -> Dict[str, str]:
    """Lower ``module`` with the CUDA pipeline and return ``{kernel module name: PTX text}``.

    Raises
    ------
    PipelineError
        If lowering fails, or no kernel was produced (nothing was bound to GPU axes).
    """
    lowered = lower(module, pipeline, stage="cuda")
    ptx = {}
    with lowered.context:
        for op in find_ops(lowered, "gpu.binary"):
            name = ir.StringAttr(op.attributes["sym_name"]).value
            for attr in ir.ArrayAttr(op.attributes["objects"]):
                ptx[name] = gpu_d.ObjectAttr(attr).object.decode()
    if not ptx:
        raise PipelineError("cuda: no GPU kernel was produced; bind loops to blockIdx/threadIdx first")
    return ptx


def check_ptx(ptx: str, arch: str = "sm_90") -> None:
    """Assemble ``ptx`` with ``ptxas -arch=<arch>``.

    Raises
    ------
    PipelineError
        If ``ptxas`` is not on PATH or rejects the PTX (the message has the command to rerun).
    """
    exe = shutil.which("ptxas")
    if exe is None:
        raise PipelineError("cuda: ptxas is not on PATH")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [exe, f"-arch={arch}", src, "-o", os.path.join(d, "kernel.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            keep = tempfile.mkstemp(prefix="mlc-kernel-", suffix=".ptx")[1]
            shutil.copy(src, keep)
            raise PipelineError(f"cuda: ptxas rejected the PTX:\n{proc.stderr}\nreproduce with: "
                                f"ptxas -arch={arch} {keep}")
