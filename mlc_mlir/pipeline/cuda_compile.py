"""``compile(module, target="cuda")``: graph -> default GPU schedules -> cubin + host code ->
an :class:`~mlc_mlir.runtime.executable.Executable` on the MLIR ExecutionEngine with
``libmlir_cuda_runtime.so``.

Stages: ``graph``, ``schedule`` and ``prepare`` as for the CPU (``compile.CPU_STAGES``),
then :func:`.cuda.lower_to_gpu` with host code (``cubin-format=bin`` when ``ptxas`` is on PATH,
else ``isa``: PTX that the driver JIT-compiles). The driver is probed
(:func:`mlc_mlir.runtime.cuda.require_cuda`) before the engine loads the CUDA runtime wrappers:
without ``libcuda.so.1`` that would abort the process.
"""

from __future__ import annotations

import shutil

from .._mlir import ExecutionEngine
from ..errors import PipelineError
from ..ir.module import Module
from ..runtime.cuda import require_cuda
from ..runtime.executable import Executable, Function, engine_invoker
from .cuda import lower_to_gpu
from .libraries import runtime_library_paths
from .options import CompileOptions

#: The CPU stages a CUDA compile shares (before lowering).
SHARED_STAGES = ("graph", "schedule", "prepare")


def compile_cuda(module: Module, options: CompileOptions, stages) -> Executable:
    """Compile ``module`` for ``options.target`` (kind ``cuda``) and load it; ``stages`` are
    :data:`mlc_mlir.pipeline.compile.CPU_STAGES` (passed in: that module calls this one).

    Raises
    ------
    PipelineError
        If a stage fails (a schedule, the mapping to the GPU, NVVM, ptxas).
    ExecutionError
        If no CUDA driver/GPU is present (checked before loading the CUDA runtime).
    """
    tgt = options.target
    if tgt.kind != "cuda":
        raise PipelineError(f"compile_cuda: target kind {tgt.kind!r}; expected 'cuda'")
    signatures = {n: module.signature(n) for n in module.function_names(public_only=True)}
    for stage in stages:
        if stage.name in SHARED_STAGES:
            module = stage.run(module, options)
    fmt = "bin" if shutil.which("ptxas") else "isa"
    lowered = lower_to_gpu(module, chip=tgt.arch, fmt=fmt, host_code=True)
    require_cuda("compile(target='cuda')")
    libs = runtime_library_paths(tgt)
    errors: list = []
    with lowered.context:
        try:
            engine = ExecutionEngine(lowered.ir_module, opt_level=options.opt_level, shared_libs=list(libs))
        except RuntimeError as e:
            raise PipelineError(f"jit: ExecutionEngine failed: {e}") from None
    functions = {n: Function(sig, engine_invoker(engine, n, errors), module.params)
                 for n, sig in signatures.items()}
    return Executable(functions, keepalive=(engine, lowered, module), export=None)
