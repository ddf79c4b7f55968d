"""``compile(module, target)``: a flat list of named stages from a graph Module to an Executable.

Stages run in the order of :data:`CPU_STAGES`, each a function ``(Module, CompileOptions) ->
Module`` (tinygrad's flat rewrite list, Triton's named stages); with ``dump_ir=DIR`` stage ``n``
writes ``DIR/<nn>-<name>.mlir``, and a stage made of steps also writes each step's output,
``DIR/<nn>-<name>.<k>-<step>.mlir``:

0. ``graph``     -- the verified input: ranked shapes (static or symbolic sizes), element types
   the lowering supports; ops on zero-size tensors folded away;
1. ``layout``    -- the layout and algorithm rewrites the default rules (or, per
   convolution, the tuning database's algorithm records) ask for (NHWC, Winograd, im2col,
   packed weights), constant evaluation as steps of their own
   (:mod:`mlc_mlir.pipeline.layout`, :data:`~mlc_mlir.pipeline.layout.LAYOUT_STEPS`);
2. ``tasks``     -- the units of scheduling and tuning, marked ``mlc.task``
   (:mod:`mlc_mlir.pipeline.tasks`); on the CPU, a unit that occurs more than once becomes a
   call of one function per distinct unit (:mod:`mlc_mlir.pipeline.shared_units`), so later
   stages and LLVM work once per distinct kernel;
3. ``schedule``  -- each unit of a function nobody scheduled gets the tuning database's record
   or the default schedule of the target: :mod:`mlc_mlir.pipeline.scheduling` (default
   schedules of a large function's units are applied with each unit in a function of its own,
   then inlined back: :mod:`mlc_mlir.pipeline.unit_scopes`);
4. ``math``      -- with ``approximate_math``, f32 ``math.exp``/``math.erf`` become polynomials
   (:class:`~mlc_mlir.pipeline.prepare_passes.math_approximation.ApproximateMath`), scalar or vectorized;
5. ``library``   -- ``mlc.call_library`` ops lowered to calls of C symbols (:class:`LowerCallLibrary`);
6. ``prepare``   -- top-level ``tensor.pad`` ops become fill + insert_slice
   (:class:`PadToInsertSlice`, so their producers write into the padded buffer), padded buffers
   are filled on their border only, before their interior is computed (:class:`FillPadBorder`),
   an argument inserted into a slice is copied by a ``linalg.generic`` (:class:`CopyIntoSlices`,
   not ``memrefCopy``) and readers of an inserted value after the insert read its slice
   (:class:`ReadInsertedSlices`); copies in and out of padded edge tiles are vectorizable
   ``linalg.generic`` ops (:class:`CopyEdgeTiles`; a returned slice of a padded result is a
   strided copy of ``lower``, threaded where large), slices that cover a whole tensor fold away
   (:class:`FoldIdentitySlices`), a row's sum loop joins the loop that writes its values
   (:class:`FuseRowLoops`), and vectorized reduction loops that stream rows of arguments start
   their loads at a vector-aligned address read at run time
   (:class:`~.prepare_passes.align_streams.AlignStreamedReductions`), and loops the schedule
   annotated ``mlc.prefetch_rows`` prefetch the rows they read ahead
   (:class:`~.prepare_passes.prefetch_rows.PrefetchRows`); a private function's returned reshape
   moves into its callers (:class:`~.prepare_passes.returned_reshapes.SinkReturnedReshapes`);
   public functions get ``llvm.emit_c_interface`` and read-only tensor arguments; callees that
   return dynamically shaped tensors (``FuseOps`` primitives of symbolic shapes) are inlined
   (``lower-affine``, ``inline``: an out-param needs its size before the call), except the
   ``no_inline`` calls of shared units that write into the destinations passed in
   (:func:`~.shared_units.inline_unequivalent_calls`, with One-Shot Bufferize's analysis);
7. ``lower``     -- the target's pipeline file, e.g. ``pipelines/cpu.pipeline`` (threads applied),
   each buffer's dealloc moved after its last use once ``buffer-deallocation-pipeline`` has run
   (:func:`~.early_dealloc.dealloc_after_last_use`), the stores of loops the schedule annotated
   ``mlc.nontemporal`` made non-temporal where aligned (:func:`~.nontemporal.nontemporal_stores`),
   the next output tile prefetched at the start of each register tile of loops annotated
   ``mlc.prefetch_tile`` (:func:`~.prefetch_tiles.prefetch_tiles`), copies of or into strided
   buffers made loops (:func:`~.strided_copies.strided_copies_to_loops`: not the runtime's
   element-wise ``memrefCopy``; one kernel per rank and element type, called from every site),
   vector reads that broadcast along their innermost dim made scalar loads and splats
   (:func:`~.broadcast_reads.unroll_broadcast_reads`), each top-level loop nest of a function
   holding several (and, by default, large enough: ``outline_nests``) moved to a ``noinline``
   function of its own, identical ones shared (:func:`~.outline_nests.outline_loop_nests`), the
   buffer cache linked in (:func:`~.buffer_cache.link_buffer_cache`), functions that differ only in
   integer constants merged (:func:`~.constant_variants.merge_constant_variants`), global variables
   in name order (:func:`~.global_order.sort_globals`: the same input gives the same code);
8. ``denormals`` -- with ``flush_denormals``, MXCSR FTZ|DAZ around each call and OpenMP region;

then ``llvm`` (LLVM IR, ``09-llvm.ll`` when dumping) and ``jit`` (MLIR ``ExecutionEngine`` at the options' opt
level and LLVM's :data:`~mlc_mlir.runtime.jit_engine.LLVM_CODEGEN_OPTIONS`, with the runtime libraries and
registered Python kernels; large weights are linked from their buffers, :mod:`mlc_mlir.pipeline.jit_weights`).
A compile longer than a few seconds shows its stage on one stderr line (:class:`~.progress.CompileProgress`,
ticking through ``jit``); a failing stage raises ``PipelineError`` with its ``mlir-opt`` repro command.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional, Tuple

from .._mlir import ir, tensor_d
from ..errors import IRError, PipelineError
from ..graph.dce import DeadCodeElimination
from ..graph.dispatch_library import LowerCallLibrary, runtime_bindings
from ..graph.fold_constant import set_default_evaluator
from ..graph.zero_size import fold_zero_size
from ..ir import emitters
from ..ir.module import Module
from ..ir.pass_pipeline import run_pass_pipeline
from ..ir.walk import find_ops, has_op
from ..runtime.executable import Executable, Function, engine_invoker, load_engine, refusing_invoker
from ..runtime.registry import make_callback
from ..target import Target, host_mismatch
from .aot import export_library, translate_to_llvmir
from .broadcast_reads import unroll_broadcast_reads
from .buffer_cache import link_buffer_cache
from .constant_variants import merge_constant_variants
from .cuda_compile import compile_cuda, export_cuda_library
from .denormals import flush_denormals
from .early_dealloc import dealloc_after_last_use
from .global_order import sort_globals
from .nontemporal import nontemporal_stores
from .prefetch_tiles import prefetch_tiles
from .strided_copies import strided_copies_to_loops
from .outline_nests import OUTLINE_MIN_OPS, outline_loop_nests
from .libraries import runtime_library_paths
from .jit_weights import link_weights
from .options import CompileOptions
from .prepare_passes.align_streams import AlignStreamedReductions
from .prepare_passes.prefetch_rows import PrefetchRows
from .prepare_passes.returned_reshapes import SinkReturnedReshapes
from .prepare_passes.destination_style import (CopyIntoSlices, FillPadBorder, PadToInsertSlice,
                                               ReadInsertedSlices, WriteReshapedIntoSlices)
from .prepare_passes.edge_copies import CopyEdgeTiles
from .prepare_passes.fuse_row_loops import FuseRowLoops
from .prepare_passes.identity_slices import FoldIdentitySlices
from .prepare_passes.math_approximation import APPROXIMATED_OPS, ApproximateMath
from .progress import CompileProgress
from .layout import LAYOUT_STEPS
from .registry import load_pipeline, pipeline_path
from .scheduling import schedule_module, unscheduled_functions
from .shared_units import inline_unequivalent_calls, share_repeated_units
from .tasks import mark_tasks


@dataclasses.dataclass(frozen=True)
class Stage:
    """One named step of :func:`compile`: ``run(module, options) -> module``; a stage made of
    ``steps`` runs them in order (``run`` is then unused) and each step's output is dumped."""

    name: str
    run: Optional[Callable[[Module, CompileOptions], Module]] = None
    steps: Tuple["Stage", ...] = ()

    def __call__(self, module: Module, options: CompileOptions) -> Module:
        """Run the stage (its steps in order), without dumping."""
        for step in self.steps:
            module = step(module, options)
        return self.run(module, options) if self.run is not None else module


def lower(module: Module, pipeline: str, stage: str = "lower", threads: Optional[int] = None,
          after: Optional[Dict[str, Callable[[Module], Module]]] = None) -> Module:
    """Run a pipeline (a name in ``pipelines/``, a path, or ``builtin.module(...)`` text) on a copy
    of ``module``.

    ``threads`` sets ``convert-scf-to-openmp{num-threads=N}`` where the pipeline has that pass.
    ``after`` maps a top-level pass of the pipeline to a function run on the module right after
    it (the pipeline runs in pieces around it); a pass the pipeline lacks is ignored. Each piece
    verifies its input and output, not the IR after each pass (``verify_each=False`` of
    :func:`~mlc_mlir.ir.pass_pipeline.run_pass_pipeline`: a third of the time on a large model).

    Raises
    ------
    PipelineError
        For an unknown pipeline name, or with MLIR's diagnostics and an ``mlir-opt`` repro command.
    """
    inline = pipeline.lstrip().startswith("builtin.module")
    text = pipeline if inline else load_pipeline(pipeline)
    source = None if inline else pipeline_path(pipeline)
    if threads is not None:
        text = text.replace("convert-scf-to-openmp,", f"convert-scf-to-openmp{{num-threads={threads}}},")
        source = None
    passes = top_level_passes(text)
    cuts = [i + 1 for i, p in enumerate(passes) if p in (after or {})]
    if not cuts:
        return run_pass_pipeline(module, text, stage, source=source, verify_each=False)
    for start, end in zip([0] + cuts, cuts + [len(passes)]):
        if end > start:
            module = run_pass_pipeline(module, "builtin.module(" + ",".join(passes[start:end]) + ")", stage,
                                       verify_each=False)
        if end in cuts:
            module = after[passes[end - 1]](module)
    return module


def top_level_passes(text: str) -> list:
    """The top-level entries of a ``builtin.module(...)`` pipeline, each as written (nested
    pipelines and options included, surrounding whitespace stripped).

    Raises
    ------
    PipelineError
        If ``text`` is not ``builtin.module(...)`` with balanced brackets.
    """
    body = text.strip()
    if not body.startswith("builtin.module(") or not body.endswith(")"):
        raise PipelineError(f"lower: pipeline {text[:60]!r}...; expected builtin.module(...)")
    out, depth, cur = [], 0, []
    for ch in body[len("builtin.module("):-1]:
        depth += ch in "({"
        depth -= ch in ")}"
        if depth < 0:
            raise PipelineError(f"lower: unbalanced brackets in pipeline {text[:60]!r}...")
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise PipelineError(f"lower: unbalanced brackets in pipeline {text[:60]!r}...")
    out.append("".join(cur).strip())
    return [p for p in out if p]


def _shaped_types(op: ir.Operation):
    types = [v.type for v in list(op.operands) + list(op.results)]
    if op.name == "func.func":
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        types += list(ftype.inputs) + list(ftype.results)
    for t in types:
        if isinstance(t, (ir.RankedTensorType, ir.MemRefType, ir.UnrankedTensorType, ir.UnrankedMemRefType)):
            yield t


#: Loop ops of scheduled functions whose bodies may hold partial (dynamic) tiles.
_SCHEDULED_LOOPS = ("scf.for", "scf.forall", "scf.parallel")


def _graph(module: Module, options: CompileOptions) -> Module:
    """Verify, and refuse what the lowering would crash on: i1 tensors/memrefs (MLIR 22's
    memref-to-llvm asserts on sub-byte stores) and unranked tensors/memrefs. Dynamic sizes
    (``tensor<?x128xf32>``) are compiled; the runtime computes them from the arguments'
    (the signature's symbolic shapes, :meth:`Module.signature`). Dead ops are erased
    (:class:`~mlc_mlir.graph.dce.DeadCodeElimination`) and ops on zero-size tensors folded away
    (:func:`~mlc_mlir.graph.zero_size.fold_zero_size`): no later stage sees an extent of 0."""
    module.verify()
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        for t in _shaped_types(op):
            et = t.element_type
            kind = "memref" if isinstance(t, (ir.MemRefType, ir.UnrankedMemRefType)) else "tensor"
            if isinstance(et, ir.IntegerType) and et.width == 1:
                found.append(f"'{op.name}' has {t}: a {kind} of i1 cannot be lowered (MLIR 22's "
                             "memref-to-llvm aborts on sub-byte stores); use int8 for boolean data")
            elif not t.has_rank:
                found.append(f"'{op.name}' has {t}: unranked shapes are not supported; give the "
                             "rank")
        return ir.WalkResult.SKIP if op.name in _SCHEDULED_LOOPS else ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if found:
        more = f" ({len(found) - 1} more such values)" if len(found) > 1 else ""
        raise PipelineError(f"compile: {found[0]}{more}")
    # dead ops would reach the schedule rules as blocks of their own unit (a dead int64 op fused
    # with a live one of another rank got the other's tile sizes)
    return fold_zero_size(DeadCodeElimination()(module))


def _schedules(options: CompileOptions) -> bool:
    """Whether the options schedule unscheduled functions (default rules or a database)."""
    return options.schedule == "default" or options.database is not None


def _layout_step(step):
    def run(module: Module, options: CompileOptions) -> Module:
        todo = unscheduled_functions(module) if _schedules(options) else []
        return step(module, options.target, todo, options) if todo else module

    return run


def _tasks(module: Module, options: CompileOptions) -> Module:
    todo = unscheduled_functions(module) if _schedules(options) else []
    if not todo:
        return module
    if options.target.kind == "cpu":
        module = share_repeated_units(module, todo)
        todo = unscheduled_functions(module)
    return mark_tasks(module, todo)


def _schedule(module: Module, options: CompileOptions) -> Module:
    return schedule_module(module, options.target, options.schedule, options.threads, options.database)


def _math(module: Module, options: CompileOptions) -> Module:
    if not options.approximate_math or not has_op(module, *APPROXIMATED_OPS):
        return module
    return ApproximateMath()(module)


def _library(module: Module, options: CompileOptions) -> Module:
    return LowerCallLibrary()(module) if has_op(module, "mlc.call_library") else module


def _distinct_results(ret: ir.Operation) -> None:
    """Give every result of ``func.return`` its own tensor: a value returned twice (schedules'
    CSE can merge two equal ops) or a returned argument is copied (an identity
    ``linalg.generic`` into a ``tensor.empty``), since buffer-results-to-out-params needs one buffer per result and MLIR 22
    crashes otherwise."""
    seen = set()
    for i, v in enumerate(list(ret.operands)):
        if v in seen or isinstance(v.owner, ir.Block):
            t = v.type
            if isinstance(t, ir.RankedTensorType):
                with ir.InsertionPoint(ret), ir.Location.unknown():
                    sizes = [tensor_d.dim(v, emitters.index_constant(d))
                             if t.is_dynamic_dim(d) else t.shape[d] for d in range(t.rank)]
                    init = tensor_d.empty(sizes, t.element_type)
                    ident = ir.AffineMap.get_identity(t.rank)
                    # an identity linalg.generic: unlike linalg.copy, bufferization keeps it
                    (copy,) = emitters.generic(f"result{i}.copy", [v], [ident], [init], [ident],
                                               ["parallel"] * t.rank, lambda a, _out: [a])
                    ret.operands[i] = copy
        seen.add(v)


def mark_tensor_arguments(f, writable: bool, keep: bool = True) -> None:
    """Set ``bufferization.writable = writable`` on the tensor arguments of the ``func.func``
    ``f`` (One-Shot Bufferize writes in place into a writable argument and copies a read-only
    one before writing it); with ``keep``, an argument already marked keeps its mark."""
    n = len(f.type.inputs)
    old = list(ir.ArrayAttr(f.attributes["arg_attrs"])) if "arg_attrs" in f.attributes else \
        [ir.DictAttr.get({}) for _ in range(n)]
    new = []
    for t, attrs in zip(f.type.inputs, old):
        d = {a.name: a.attr for a in ir.DictAttr(attrs)}
        if isinstance(t, ir.RankedTensorType) and not (keep and "bufferization.writable" in d):
            d["bufferization.writable"] = ir.BoolAttr.get(writable)
        new.append(ir.DictAttr.get(d))
    f.attributes["arg_attrs"] = ir.ArrayAttr.get(new)


def _read_only_arguments(f) -> None:
    """Mark the tensor arguments of a public function ``bufferization.writable = false``: an op
    that accumulates into an argument (``linalg.matmul outs(%arg)``) then writes a copy, and the
    caller's numpy array is never modified (One-Shot Bufferize treats arguments as writable by
    default). An argument the graph already marks (``FunctionBuilder.write_argument``, an in/out
    argument) keeps its mark."""
    mark_tensor_arguments(f, False, keep=True)


def _dynamic_call_results(module: Module) -> bool:
    """Whether a ``func.call`` returns a dynamically shaped tensor (buffer-results-to-out-params
    cannot give it an out-param: its size is known only inside the callee); calls marked
    ``no_inline`` (shared units, whose dynamic results are destinations passed in) do not count."""
    with module.context:
        return any(isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape
                   for op in find_ops(module, "func.call") if "no_inline" not in op.attributes
                   for r in op.results)


def _prepare(module: Module, options: CompileOptions) -> Module:
    # CUDA: the pads left outside the kernels become pad kernels (pipeline.cuda_pads); the
    # CPU's in-place border fills and slice copies would stay on the host
    cpu = options.target.kind == "cpu"
    module = inline_unequivalent_calls(module) if cpu else module
    if _dynamic_call_results(module):   # primitives with dynamic results are inlined (scheduled)
        # affine ops first become arith: the inliner keeps affine.min/apply out of non-affine
        # regions (a call inside an scf.if, SpecializeUnitRows), where their symbols are invalid
        module = run_pass_pipeline(module, "builtin.module(lower-affine, inline, symbol-dce)", "prepare")
    out = PadToInsertSlice()(module) if cpu and has_op(module, "tensor.pad") else module.clone()
    if cpu and has_op(out, "tensor.insert_slice"):
        out = WriteReshapedIntoSlices()(ReadInsertedSlices()(CopyIntoSlices()(FillPadBorder()(out))))
    if cpu and has_op(out, "tensor.extract_slice"):
        out = FoldIdentitySlices()(CopyEdgeTiles()(out))
    if cpu:
        out = FuseRowLoops()(out)
    if cpu and options.target.vector_bits > 128:
        out = AlignStreamedReductions(options.target.vector_bits // 8)(out)
    if cpu:
        out = SinkReturnedReshapes()(PrefetchRows()(out))
    public = set(out.function_names(public_only=True))
    with out.context:
        for f in out.func_ops():
            if f.is_external:
                continue
            if f.sym_name.value in public:
                f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
                _read_only_arguments(f)
            for block in f.regions[0].blocks:
                ret = block.operations[len(block.operations) - 1].operation
                if ret.name == "func.return":
                    _distinct_results(ret)
    return out


def _nests_of_buffers(options: CompileOptions) -> Callable[[Module], Module]:
    """The step of ``lower`` on the buffers: non-temporal stores, C tiles prefetched, strided
    copies as loops (:func:`~.strided_copies.strided_copies_to_loops`, threaded as the schedules
    are: the options' threads, else the target's cores), reads that broadcast along their
    innermost dim unrolled into scalar loads, then the loop nests outlined as
    ``options.outline_nests`` says (``"auto"``: functions of ``OUTLINE_MIN_OPS`` or more)."""
    threads = (options.threads or options.target.cores or 1) if options.target.kind == "cpu" else 1

    def run(module: Module) -> Module:
        module = unroll_broadcast_reads(strided_copies_to_loops(
            prefetch_tiles(nontemporal_stores(module)), threads, options.target.l1d_bytes))
        if options.outline_nests == "never":
            return module
        return outline_loop_nests(module, OUTLINE_MIN_OPS if options.outline_nests == "auto" else 0)

    return run


def _lower(module: Module, options: CompileOptions) -> Module:
    out = sort_globals(link_buffer_cache(lower(
        module, options.pipeline or options.target.pipeline, threads=options.threads,
        after={"buffer-deallocation-pipeline": dealloc_after_last_use,
               "convert-bufferization-to-memref": _nests_of_buffers(options)})))
    if options.target.kind == "cpu":
        merge_constant_variants(out)
        if options.target.cpu:
            set_codegen_target(out, options.target)
    return out


def set_codegen_target(module: Module, target: Target) -> None:
    """Give every ``llvm.func`` with a body of ``module`` (LLVM dialect) the ``target_cpu`` and
    ``target_features`` of ``target`` (:attr:`Target.codegen_features`): LLVM then generates for
    the target with its tuning preferences, in the JIT (whose own target is the detected host)
    and in ``llc`` alike, and OpenMP's outlined regions inherit them."""
    with module.context:
        cpu = ir.StringAttr.get(target.cpu)
        features = ir.Attribute.parse("#llvm.target_features<[" + ", ".join(
            f'"{f}"' for f in target.codegen_features) + "]>")
        for op in module.ir_module.body.operations:
            op = op.operation
            if op.name == "llvm.func" and len(op.regions[0].blocks):
                op.attributes["target_cpu"] = cpu
                op.attributes["target_features"] = features


def _denormals(module: Module, options: CompileOptions) -> Module:
    return flush_denormals(module) if options.flush_denormals else module


#: The stages of a CPU compile, in order.
CPU_STAGES: Tuple[Stage, ...] = (
    Stage("graph", _graph),
    Stage("layout", steps=tuple(Stage(name, _layout_step(step)) for name, step in LAYOUT_STEPS)),
    Stage("tasks", _tasks), Stage("schedule", _schedule),
    Stage("math", _math), Stage("library", _library),
    Stage("prepare", _prepare),
    Stage("lower", _lower),
    Stage("denormals", _denormals),
)


def _dump(options: CompileOptions, filename: str, text_fn) -> None:
    if options.dump_ir:
        with open(os.path.join(options.dump_ir, filename), "w") as f:
            f.write(text_fn())


def run_stage(stage: Stage, module: Module, options: CompileOptions, n: int = 0) -> Module:
    """Run one stage (its steps in order, each dumped as ``<nn>-<stage>.<k>-<step>.mlir``)."""
    if not stage.steps:
        return stage(module, options)
    for k, step in enumerate(stage.steps, 1):
        module = step.run(module, options)
        _dump(options, f"{n:02d}-{stage.name}.{k}-{step.name}.mlir", lambda m=module: str(m))
    return module


def run_stages(module: Module, options: CompileOptions, stages=CPU_STAGES,
               until: Optional[str] = None,
               progress: Optional[CompileProgress] = None) -> Tuple[Module, Module]:
    """Run ``stages`` in order (through stage ``until`` if given), reporting each to
    ``progress``; returns ``(after 'library', final)`` (the former names the native libraries
    and Python kernels the engine needs)."""
    with_library = module
    for n, stage in enumerate(stages):
        if progress is not None:
            progress.stage(n, stage.name)
        module = run_stage(stage, module, options, n)
        if stage.name == "library":
            with_library = module
        _dump(options, f"{n:02d}-{stage.name}.mlir", lambda m=module: str(m))
        if stage.name == until:
            return with_library, module
    _dump(options, f"{len(stages):02d}-llvm.ll", lambda: translate_to_llvmir(module))
    return with_library, module


def compile(module: Module, target="cpu", *, threads: Optional[int] = None, opt_level: int = 2,
            flush_denormals: bool = False, approximate_math: bool = True, winograd: Optional[bool] = None,
            schedule: str = "default", database=None, pipeline: Optional[str] = None,
            outline_nests: str = "auto", dump_ir: Optional[str] = None,
            options: Optional[CompileOptions] = None) -> Executable:
    """Compile a Module for ``target`` and load it with the MLIR ExecutionEngine (JIT).

    Parameters
    ----------
    module : Module
        Graph functions on ranked tensors, static or with symbolic sizes (``tensor<?x128xf32>``:
        one compile serves every size; the Executable checks sizes and bounds at each call)
        (from :class:`GraphBuilder`, ``Module.parse`` or
        a schedule's ``sch.mod``).
    target : str or Target
        ``"cpu"`` (the host, :meth:`Target.host`) or a :class:`Target`.
    threads, opt_level, flush_denormals, approximate_math, winograd, schedule, database, pipeline, outline_nests, dump_ir
        See :class:`CompileOptions`; ignored when ``options`` is given. By default every function
        that was not scheduled by hand gets the target's default schedule (``schedule="none"``
        compiles plain loops); ``database=mlc.tune(...)`` applies tuned schedules.
    options : CompileOptions, optional
        All options at once (the cache key of the result).

    Returns
    -------
    Executable
        ``exe(*arrays)``; ``exe.export_library(path)`` writes a ``.so`` for the same target.
        For a target whose features this machine lacks (cross-compiling), the code is not
        loaded: calls raise ``ExecutionError`` naming the missing features, export works.

    Raises
    ------
    IRError
        If ``module`` is not a Module or does not verify.
    PipelineError
        For invalid options, unsupported types, a failing stage, or a target that cannot run
        here.
    ExecutionError
        For ``target="cuda"`` on a machine without a CUDA driver or GPU (checked before the CUDA
        runtime is loaded; :func:`mlc_mlir.pipeline.cuda.compile_to_ptx` needs neither).
    """
    if not isinstance(module, Module):
        raise IRError(f"compile: expected an mlc.Module, got {type(module).__name__}"
                      + ("; parse text with mlc.Module.parse(text)" if isinstance(module, str) else ""))
    if options is None:
        options = CompileOptions(target=target, threads=threads, opt_level=opt_level,
                                 flush_denormals=flush_denormals,
                                 approximate_math=approximate_math, winograd=winograd, schedule=schedule,
                                 database=database, pipeline=pipeline,
                                 outline_nests=outline_nests, dump_ir=dump_ir)
    tgt: Target = options.target
    if tgt.kind == "cuda":
        return compile_cuda(module, options, CPU_STAGES)
    signatures = {n: module.signature(n) for n in module.function_names(public_only=True)}
    with CompileProgress(len(CPU_STAGES) + 1) as progress:
        with_library, lowered = run_stages(module, options, progress=progress)
        native_libs, callbacks = runtime_bindings(with_library)
        libs = runtime_library_paths(tgt) + tuple(native_libs)
        errors: list = []
        cfuncs = [(sym, make_callback(kernel, specs, errors)) for sym, kernel, specs in callbacks]
        # code for features this machine lacks is compiled (to export) but never loaded or run
        foreign = host_mismatch(tgt.cpu, tgt.features)
        engine, weights = None, []
        with progress.ticking(len(CPU_STAGES), "jit"):   # LLVM releases the GIL: the line ticks
            if not foreign:   # large weights are linked from their buffers, not compiled
                jit_module, symbols, weights = link_weights(lowered)
                engine = load_engine(jit_module, options.opt_level, libs, cfuncs, symbols)

    def invoker(name: str):
        if foreign:
            return refusing_invoker(name, foreign)
        invoke = engine_invoker(engine, name, errors)
        invoke._weights = weights   # the engine reads them: they live as long as any Function
        return invoke

    functions = {n: Function(sig, invoker(n), module.params) for n, sig in signatures.items()}

    def export(path: str) -> str:
        return export_library(lowered, signatures, module.params, libs, path, target=tgt)

    export = None if callbacks else export  # Python kernels cannot be linked into a .so
    return Executable(functions, keepalive=(engine, lowered, module, cfuncs), export=export)


def _evaluate_constants(module: Module) -> Executable:
    """The default evaluator of ``graph.FoldConstant``: plain loops, one thread."""
    return compile(module, "cpu", threads=1, schedule="none")


set_default_evaluator(_evaluate_constants)


def build_library(module: Module, path: str, target="cpu", *,
                  options: Optional[CompileOptions] = None, **kwargs) -> str:
    """Compile ``module`` ahead of time into the shared library ``path`` (plus ``.json`` and
    ``.params.npz``), without loading it: for ``target="cuda"`` a ``.so`` with host code and
    the embedded cubin, built without a GPU (:func:`.cuda_compile.export_cuda_library`); for
    a CPU target the same as ``compile(module, target).export_library(path)``. Load it with
    :func:`mlc_mlir.runtime.load_library`.

    Parameters
    ----------
    module : Module
    path : str
        Where to write the ``.so``.
    target : str or Target
        As for :func:`compile`.
    options : CompileOptions, optional
        All options at once; else ``kwargs`` are :func:`compile`'s keywords.

    Returns
    -------
    str
        The absolute path of the ``.so``.

    Raises
    ------
    IRError, PipelineError, ExecutionError
        As :func:`compile` (never for a missing GPU) and :meth:`Executable.export_library`.
    """
    if not isinstance(module, Module):
        raise IRError(f"build_library: expected an mlc.Module, got {type(module).__name__}")
    if options is None:
        options = CompileOptions(target=target, **kwargs)
    if options.target.kind == "cuda":
        return export_cuda_library(module, options, CPU_STAGES, path)
    return compile(module, options=options).export_library(path)
