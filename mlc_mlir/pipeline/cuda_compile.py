"""``compile(module, target="cuda")``: graph -> default GPU schedules -> cubin + host code ->
an :class:`~mlc_mlir.runtime.executable.Executable` on the MLIR ExecutionEngine with
``libmlir_cuda_runtime.so``.

Stages: ``graph``, ``layout``, ``tasks``, ``schedule`` and ``prepare`` as for the CPU (``compile.CPU_STAGES``),
then :func:`.cuda.lower_to_gpu` with host code (``cubin-format=bin`` when ``ptxas`` is on PATH,
else ``isa``: PTX that the driver JIT-compiles). The driver is probed
(:func:`mlc_mlir.runtime.cuda.require_cuda`) before the engine loads the CUDA runtime wrappers:
without ``libcuda.so.1`` that would abort the process.
"""

from __future__ import annotations

import shutil

from ..errors import PipelineError
from ..ir.module import Module
from ..runtime.cuda import DEVICE_SUFFIX, require_cuda
from ..runtime.executable import Executable, Function, engine_invoker, load_engine
from .aot import export_library
from .buffer_cache import link_buffer_cache
from .cuda import lower_to_gpu
from .jit_weights import link_weights
from .libraries import runtime_library_paths
from .options import CompileOptions

#: The CPU stages a CUDA compile shares (before lowering).
SHARED_STAGES = ("graph", "layout", "tasks", "schedule", "prepare")


def lower_cuda(module: Module, options: CompileOptions, stages):
    """The stages of :func:`compile_cuda` short of loading: ``(signatures, lowered)``, where
    ``lowered`` is host code in the LLVM dialect plus ``gpu.binary`` kernels (a cubin when
    ``ptxas`` is on PATH, else PTX). Needs no GPU.

    Raises
    ------
    PipelineError
        If ``options.target`` is not a cuda target, a function has symbolic sizes, or a stage
        fails.
    """
    tgt = options.target
    if tgt.kind != "cuda":
        raise PipelineError(f"compile_cuda: target kind {tgt.kind!r}; expected 'cuda'")
    signatures = {n: module.signature(n) for n in module.function_names(public_only=True)}
    dynamic = sorted(n for n, s in signatures.items() if s.is_dynamic)
    if dynamic:
        raise PipelineError(f"compile(target='cuda'): function(s) {dynamic} have symbolic sizes; "
                            "the CUDA target compiles static shapes (fix the sizes, e.g. "
                            "f.arg(shape=(1, 128)), or compile for the CPU)")
    for stage in stages:
        if stage.name in SHARED_STAGES:
            module = stage(module, options)
    fmt = "bin" if shutil.which("ptxas") else "isa"
    # host code that allocates gets the buffer cache, as CPU code does
    return signatures, link_buffer_cache(lower_to_gpu(module, chip=tgt.arch, fmt=fmt, host_code=True))


def export_cuda_library(module: Module, options: CompileOptions, stages, path: str) -> str:
    """Compile ``module`` for CUDA and write an AOT library: a ``.so`` with the host code and
    the embedded cubin, its ``.json`` metadata (``"device": "cuda"``) and parameters. Needs no
    GPU; running it needs ``libmlir_cuda_runtime.so`` (beside the ``.so`` or at the MLIR wheel's
    path it was linked from), a CUDA driver and numpy
    (:func:`mlc_mlir.runtime.load_library`). Source: TVM ``export_library`` of a CUDA module
    (host ``.so`` + embedded device blob).

    Returns
    -------
    str
        The absolute path of the ``.so`` (its metadata and parameters are written beside it).

    Raises
    ------
    PipelineError
        If a stage fails (schedule, mapping, NVVM, ptxas).
    ExecutionError
        If ``llc``/``gcc`` fail or ``path`` cannot be written.
    """
    signatures, lowered = lower_cuda(module, options, stages)
    tgt = options.target
    return export_library(lowered, signatures, module.params, runtime_library_paths(tgt), path,
                          target=tgt, device="cuda")


def compile_cuda(module: Module, options: CompileOptions, stages) -> Executable:
    """Compile ``module`` for ``options.target`` (kind ``cuda``) and load it; ``stages`` are
    :data:`mlc_mlir.pipeline.compile.CPU_STAGES` (passed in: that module calls this one).
    ``exe.export_library(path)`` writes the AOT library of :func:`export_cuda_library`.
    ``exe(*numpy arrays)`` copies the arguments to the GPU and the results back on each call;
    ``exe.on_device(*device arrays)`` keeps them on the GPU (``DeviceArray``, CUDA tensors).
    The constants the kernels read are copied to the GPU once, when the engine is initialized
    (:mod:`.cuda_host`), and freed with the engine.

    Raises
    ------
    PipelineError
        If a stage fails (a schedule, the mapping to the GPU, NVVM, ptxas).
    ExecutionError
        If no CUDA driver/GPU is present (checked before loading the CUDA runtime).
    """
    tgt = options.target
    signatures, lowered = lower_cuda(module, options, stages)
    require_cuda("compile(target='cuda')")
    libs = runtime_library_paths(tgt)
    errors: list = []
    # the weights' host copies are linked from their buffers, not compiled: the load function
    # (a global constructor) copies them to the device once, before the first call
    jit_module, symbols, weights = link_weights(lowered)
    engine = load_engine(jit_module, options.opt_level, libs, native_symbols=symbols)
    functions = {n: Function(sig, engine_invoker(engine, n, errors), module.params,
                             device_invoke=engine_invoker(engine, n + DEVICE_SUFFIX, errors))
                 for n, sig in signatures.items()}

    def export(path: str) -> str:
        return export_library(lowered, signatures, module.params, libs, path, target=tgt,
                              device="cuda")

    return Executable(functions, keepalive=(engine, lowered, module, weights), export=export)
