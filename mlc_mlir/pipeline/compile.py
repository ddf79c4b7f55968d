"""``compile(module, target)``: ordered named stages from a graph Module to an Executable.

Stages (each one's IR can be dumped with ``dump_ir=DIR``):

1. ``graph``   -- the verified input module (``00-graph.mlir``);
2. ``prepare`` -- public functions get ``llvm.emit_c_interface`` (``01-prepare.mlir``);
3. ``lower``   -- the target's pipeline file, e.g. ``pipelines/cpu.pipeline`` (``02-lower.mlir``);
   (with ``flush_denormals=True``, then the ``denormals`` stage: MXCSR FTZ|DAZ around each call);
4. ``llvm``    -- translation to LLVM IR (``03-llvm.ll``, written only when dumping);
5. ``jit``     -- MLIR ``ExecutionEngine`` at ``opt_level`` with the runtime libraries.

A failing stage raises ``PipelineError`` with the ``mlir-opt`` command that reproduces it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Optional

from .._mlir import ExecutionEngine, PassManager, ir, llvm_d
from ..errors import PipelineError
from ..ir.module import Module, diagnostics
from ..runtime.executable import Executable, Function, engine_invoker
from .registry import load_pipeline, pipeline_path
from .target import get_target, runtime_library_paths


def _dump(dump_ir: Optional[str], filename: str, text_fn) -> None:
    if dump_ir:
        os.makedirs(dump_ir, exist_ok=True)
        with open(os.path.join(dump_ir, filename), "w") as f:
            f.write(text_fn())


def lower(module: Module, pipeline: str, stage: str = "lower") -> Module:
    """Run a pipeline (name, path, or ``builtin.module(...)`` text) on a copy of ``module``.

    Raises
    ------
    PipelineError
        With MLIR's diagnostics and an ``mlir-opt`` repro command (the input is saved to a file).
    """
    text = pipeline if pipeline.lstrip().startswith("builtin.module") else load_pipeline(pipeline)
    out = module.clone()
    with out.context:
        try:
            pm = PassManager.parse(text)
        except (ValueError, ir.MLIRError) as e:
            raise PipelineError(f"{stage}: cannot parse pipeline {pipeline!r}: {e}") from None
        try:
            pm.run(out.operation)
        except ir.MLIRError as e:
            fd, path = tempfile.mkstemp(prefix=f"mlc-{stage}-", suffix=".mlir")
            with os.fdopen(fd, "w") as f:
                f.write(str(module))
            pfile = pipeline_path(pipeline) if not pipeline.lstrip().startswith("builtin") else None
            ptext = f'"$(cat {pfile})"' if pfile else repr(text)
            raise PipelineError(f"{stage}: pipeline failed:\n{diagnostics(e)}\nreproduce with:\n"
                                f"  mlir-opt --pass-pipeline={ptext} {path}") from None
    return out


def prepare(module: Module) -> Module:
    """Copy of ``module`` whose public functions carry ``llvm.emit_c_interface``."""
    out = module.clone()
    with out.context:
        for f in out.func_ops():
            if f.sym_name.value in out.function_names(public_only=True):
                f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    return out


def compile(module: Module, target="cpu", *, pipeline: Optional[str] = None, opt_level: int = 3,
            dump_ir: Optional[str] = None, flush_denormals: bool = False) -> Executable:
    """Compile a Module for ``target`` and load it with the MLIR ExecutionEngine (JIT).

    Parameters
    ----------
    module : Module
        Graph functions on static-shaped tensors (from :class:`GraphBuilder`, ``Module.parse`` or
        a schedule's ``sch.mod``).
    target : str or Target
        ``"cpu"``.
    pipeline : str, optional
        Override the target's pipeline (name in ``pipelines/``, path, or pipeline text).
    opt_level : int
        LLVM optimization level of the JIT (0-3).
    dump_ir : str, optional
        Folder to write each stage's IR to.
    flush_denormals : bool
        Run the compiled functions (and their OpenMP threads) with subnormal floats flushed to
        zero (x86 MXCSR FTZ|DAZ, like ``torch.set_flush_denormal``); see
        :mod:`mlc_mlir.pipeline.denormals`. Off by default: numpy keeps subnormals.

    Returns
    -------
    Executable

    Raises
    ------
    IRError
        If the module does not verify.
    PipelineError
        If a stage fails.
    """
    tgt = get_target(target)
    module.verify()
    _check_supported_types(module)
    signatures = {n: module.signature(n) for n in module.function_names(public_only=True)}
    _dump(dump_ir, "00-graph.mlir", lambda: str(module))
    prepared = prepare(_lower_library_calls(module))
    _dump(dump_ir, "01-prepare.mlir", lambda: str(prepared))
    lowered = lower(prepared, pipeline or tgt.pipeline)
    if flush_denormals:
        from .denormals import flush_denormals as flush

        lowered = flush(lowered)
    _dump(dump_ir, "02-lower.mlir", lambda: str(lowered))
    _dump(dump_ir, "03-llvm.ll", lambda: translate_to_llvmir(lowered))
    from ..graph.dispatch_library import runtime_bindings
    from ..runtime.registry import make_callback

    native_libs, callbacks = runtime_bindings(prepared)
    libs = runtime_library_paths(tgt) + tuple(native_libs)
    errors: list = []
    cfuncs = [(sym, make_callback(kernel, specs, errors)) for sym, kernel, specs in callbacks]
    with lowered.context:
        try:
            engine = ExecutionEngine(lowered.ir_module, opt_level=opt_level, shared_libs=list(libs))
        except RuntimeError as e:
            raise PipelineError(f"jit: ExecutionEngine failed: {e}") from None
        for sym, cf in cfuncs:
            engine.register_runtime(sym, cf)
    functions = {n: Function(sig, engine_invoker(engine, n, errors), module.params)
                 for n, sig in signatures.items()}

    def export(path: str) -> str:
        from ..runtime.aot import export_library
        return export_library(lowered, signatures, module.params, libs, path)

    export = None if callbacks else export  # Python kernels cannot be linked into a .so
    return Executable(functions, keepalive=(engine, lowered, module, cfuncs), export=export)


def _check_supported_types(module: Module) -> None:
    """Refuse tensors of ``i1``: MLIR 22's memref-to-LLVM lowering asserts (aborts the process)
    on stores of sub-byte element types."""
    import re

    text = module.to_text(elide_weights=True)
    m = re.search(r"tensor<([0-9x]*)i1>", text)
    if m:
        raise PipelineError(f"compile: a tensor of i1 ({m.group(0)}) cannot be lowered (MLIR 22's "
                            "memref-to-llvm aborts on sub-byte stores); use int8 for boolean data")


def _lower_library_calls(module: Module) -> Module:
    """Stage ``library``: lower ``mlc.call_library`` ops (if any) to calls of C symbols."""
    if "mlc.call_library" not in module.to_text(elide_weights=True):
        return module
    from ..graph.dispatch_library import LowerCallLibrary

    return LowerCallLibrary()(module)


def translate_to_llvmir(lowered: Module) -> str:
    """LLVM IR text of a module in the LLVM dialect (``mlir-translate --mlir-to-llvmir``)."""
    with lowered.context:
        return str(llvm_d.translate_module_to_llvmir(lowered.operation))
