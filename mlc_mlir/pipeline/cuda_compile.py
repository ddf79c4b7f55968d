"""``compile(module, target="cuda")``: graph -> default GPU schedules -> cubin + host code ->
an :class:`~mlc_mlir.runtime.executable.Executable` on the MLIR ExecutionEngine with
``libmlir_cuda_runtime.so``.

Stages: ``graph``, ``layout``, ``tasks``, ``schedule`` and ``prepare`` as for the CPU (``compile.CPU_STAGES``),
with, after ``graph``, the constant subgraphs evaluated (``graph.FoldConstant``: a weights-only
op, e.g. batch norm's ``scale = gamma / sqrt(var + eps)``, is no kernel launched per call) and
the elementwise chains merged (:func:`merge_elementwise_chains`), then
:func:`.cuda.lower_to_gpu` with host code (``cubin-format=bin`` when ``ptxas`` is on PATH,
else ``isa``: PTX that the driver JIT-compiles). The driver is probed
(:func:`mlc_mlir.runtime.cuda.require_cuda`) before the engine loads the CUDA runtime wrappers:
without ``libcuda.so.1`` that would abort the process.
"""

from __future__ import annotations

import shutil

from ..errors import PipelineError
from ..graph.fold_constant import FoldConstant
from ..graph.fuse_ops import FuseOps
from ..ir.pass_pipeline import run_pass_pipeline
from ..ir.module import Module
from ..runtime.cuda import DEVICE_SUFFIX, require_cuda
from ..runtime.executable import Executable, Function, engine_invoker, load_engine
from .aot import export_library
from .buffer_cache import link_buffer_cache
from .cuda import lower_to_gpu
from .cuda_modules import load_gpu_binaries
from .jit_weights import link_weights
from .libraries import runtime_library_paths
from .options import CompileOptions

#: The CPU stages a CUDA compile shares (before lowering).
SHARED_STAGES = ("graph", "layout", "tasks", "schedule", "prepare")


#: Constant ops the CUDA compile evaluates once: ``linalg.generic`` (weights-only arithmetic,
#: e.g. batch norm's ``scale = gamma / sqrt(var + eps)`` and shift). Not the named ops: a
#: constant ``transpose(W)`` would make a matmul on constant weights, which the CPU layout
#: packs into a ``linalg.mmt4d`` that no GPU rule schedules.
FOLDED_ON_CUDA = ("linalg.generic",)


def merge_elementwise_chains(module: Module) -> Module:
    """Each chain of elementwise ops of ``module``'s graph functions (batch norm, relu, a
    residual add) merged into one ``linalg.generic``: ``graph.FuseOps`` outlines the groups and
    merges their chains (``linalg-fuse-elementwise-ops``, named ``<first op>.fused``), the
    ``inline`` pass puts them back (without its default canonicalization, which composes
    consecutive transposes into an op without a name, left unscheduled). On the GPU every op is
    a kernel of its own: a chain is one launch and one pass over memory instead of one per op
    (TVM Relay's ``FuseOps`` before CUDA codegen).

    Raises
    ------
    PipelineError
        If inlining fails.
    """
    return run_pass_pipeline(FuseOps()(module), "builtin.module(inline{default-pipeline=},symbol-dce)",
                             "cuda fuse")


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
        if stage.name == "graph":
            module = merge_elementwise_chains(FoldConstant(only=FOLDED_ON_CUDA)(module))
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
    # the cubins loaded by ordinary host functions: one code section (cuda_modules' docstring)
    jit_module = load_gpu_binaries(jit_module)
    engine = load_engine(jit_module, options.opt_level, libs, native_symbols=symbols)
    functions = {n: Function(sig, engine_invoker(engine, n, errors), module.params,
                             device_invoke=engine_invoker(engine, n + DEVICE_SUFFIX, errors))
                 for n, sig in signatures.items()}

    def export(path: str) -> str:
        return export_library(lowered, signatures, module.params, libs, path, target=tgt,
                              device="cuda")

    return Executable(functions, keepalive=(engine, lowered, module, weights), export=export)
