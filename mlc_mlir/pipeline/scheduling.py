"""Stage ``schedule`` of :func:`mlc_mlir.compile`: every function that nobody scheduled gets the
target's default schedule, or the tuning database's best schedule.

A function is *already scheduled* when its body holds ``scf`` loops (it came from ``sch.mod``):
it is compiled as given. The others are scheduled function by function:

* ``schedule="none"``: left as plain linalg (lowered to naive loops);
* ``schedule="default"``: :func:`mlc_mlir.schedule.default_rules.default_schedule` with the
  options' target and threads (TVM dlight's default rules), after the per-op layout rewrites the
  default rules ask for (and ``graph.SpecializeUnitRows``: a matmul of dynamic M gets an
  ``M == 1`` version chosen at run time): NCHW convolutions that
  :func:`~mlc_mlir.schedule.rules.conv.prefers_nhwc` picks become NHWC ones between transposes
  (``graph.ConvToNHWC``), and a constant filter's transpose is folded (``graph.FoldConstant``
  with the ``evaluate`` callable ``mlc.compile`` passes);
* with a ``database`` (any object with ``apply_best(module, target) -> Module``, e.g. the tuner's
  :class:`~mlc_mlir.tune.database.Database`): the module is fused (``graph.FuseOps``), the
  database replaces the primitive functions it has records for, and the default schedule takes
  the rest (TVM's ``relax.build`` after ``MetaScheduleApplyDatabase``).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Protocol

from .._mlir import ir
from ..errors import PipelineError, ScheduleError
from ..graph.constant_eval import NUMPY_OPS
from ..graph.conv_im2col import ConvToIm2col
from ..graph.conv_layout import ConvToNHWC
from ..graph.conv_winograd import ConvToWinograd
from ..graph.fold_constant import FoldConstant
from ..graph.fuse_ops import FuseOps
from ..graph.pack_matmul import PackMatmulWeights
from ..graph.specialize_rows import SpecializeUnitRows
from ..graph.transpose_propagation import PropagateTransposes
from ..ir.module import OP_NAME_ATTR, Module
from ..ir.walk import has_op
from ..schedule.cpu_recipes import packed_b_panel
from ..schedule.default_rules import default_schedule
from ..schedule.rules.conv import prefers_im2col, prefers_nhwc, winograd_tile
from ..target import Target

#: Values of ``CompileOptions.schedule``.
SCHEDULE_MODES = ("default", "none")


class ScheduleDatabase(Protocol):
    """What :func:`mlc_mlir.compile` needs from a tuning database (a protocol: the pipeline
    layer never imports the tuner)."""

    def apply_best(self, module: Module, target: Target) -> Module:
        """``module`` (fused) with each primitive function that has a record replaced by its
        best scheduled version; other functions unchanged."""


def _has_loops(fn) -> bool:
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name in ("scf.for", "scf.forall", "scf.parallel"):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    fn.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(found)


def _has_named_ops(fn) -> bool:
    return any(OP_NAME_ATTR in op.operation.attributes and op.operation.name.startswith("linalg.")
               for op in fn.regions[0].blocks[0].operations) if fn.regions[0].blocks else False


def unscheduled_functions(module: Module) -> List[str]:
    """Names of the functions with named linalg ops at top level and no ``scf`` loops."""
    with module.context:
        return [f.sym_name.value for f in module.func_ops()
                if not f.is_external and _has_named_ops(f) and not _has_loops(f)]


def _constant_filter_transposed(module: Module) -> bool:
    """Whether a filter transpose made by ``ConvToNHWC`` (``<conv>.w_hwcf``) reads a constant.

    Only those are folded: folding the ``transpose(W)`` of imported ``Linear`` layers too made
    the small BERT's LLVM compile 4x slower (23 s instead of 6 s; the matmuls then read
    constant globals) for no measurable run-time gain (0.72 -> 0.74x onnxruntime, in noise)."""
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "linalg.transpose" and OP_NAME_ATTR in op.attributes and \
                ir.StringAttr(op.attributes[OP_NAME_ATTR]).value.endswith(".w_hwcf"):
            src = op.operands[0].owner
            if not isinstance(src, ir.Block) and src.name == "arith.constant":
                found.append(op)
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(found)


def layout_rewrites(module: Module, target: Target, functions: List[str],
                    evaluate: Optional[Callable] = None, winograd: bool = False) -> Module:
    """The per-op layout rewrites of the default schedule on ``functions``: NCHW convolutions
    that :func:`~mlc_mlir.schedule.rules.conv.prefers_nhwc` picks for ``target`` become NHWC
    ones between transposes (``graph.ConvToNHWC``), and the transposes sink through
    elementwise ops, pads and poolings until inverse pairs cancel
    (``graph.PropagateTransposes``: consecutive convolutions stay NHWC); with ``winograd``,
    stride-1 3x3 NHWC convolutions that :func:`~mlc_mlir.schedule.rules.conv.winograd_tile`
    picks become Winograd ones (``graph.ConvToWinograd``; the constant filter transposes are
    folded first, so their Winograd transforms are constants too); the other NHWC convolutions
    with small output maps (:func:`~mlc_mlir.schedule.rules.conv.prefers_im2col`) become im2col +
    ``linalg.matmul`` (``graph.ConvToIm2col``). With ``evaluate``
    (``mlc.compile``), matmuls on a constant B that feed no elementwise op get B packed into
    the panels of their register tile (``graph.PackMatmulWeights``,
    :func:`~mlc_mlir.schedule.cpu_recipes.packed_b_panel`: a ``linalg.mmt4d``), and the
    transposes of constant filters and packed weights are folded (``graph.FoldConstant``
    restricted to the data-movement ops numpy evaluates: no constant subgraph is compiled).
    ``module`` when there is nothing to rewrite."""
    out = module
    if has_op(module, "linalg.conv_2d_nchw_fchw"):
        def select(x_shape, w_shape, out_shape, dtype):
            return prefers_nhwc(target, x_shape, w_shape, out_shape, dtype)

        out = PropagateTransposes(functions)(ConvToNHWC(select, functions)(module))
    if winograd and has_op(out, "linalg.conv_2d_nhwc_hwcf"):
        def select_tile(x_shape, w_shape, out_shape, dtype):
            return winograd_tile(target, x_shape, w_shape, out_shape, dtype)
        if evaluate is not None and _constant_filter_transposed(out):
            # constant filters become constants first, so their Winograd transforms fold too
            out = FoldConstant(evaluate, only=NUMPY_OPS)(out)
        out = ConvToWinograd(select_tile, functions)(out)
    if has_op(out, "linalg.conv_2d_nhwc_hwcf"):
        def select_gemm(x_shape, w_shape, out_shape, dtype):
            return prefers_im2col(target, x_shape, w_shape, out_shape, dtype)

        out = ConvToIm2col(select_gemm, functions)(out)
    packed = False
    if evaluate is not None and has_op(out, "linalg.matmul"):
        def select_panel(m, n, k, dtype):
            return packed_b_panel(target, m, n, k, dtype)

        out = PackMatmulWeights(select_panel, functions)(out)
        packed = has_op(out, "linalg.mmt4d")
    if evaluate is not None and (packed or _constant_filter_transposed(out)):
        out = FoldConstant(evaluate, only=NUMPY_OPS)(out)
    return out


def schedule_module(module: Module, target: Target, mode: str, threads: Optional[int],
                    database: Optional[ScheduleDatabase] = None,
                    evaluate: Optional[Callable] = None, winograd: bool = False) -> Module:
    """Schedule the functions of ``module`` that are not scheduled yet (see the module docstring).

    ``evaluate`` (``mlc.compile``) lets the layout rewrites fold constant filters;
    ``winograd`` (``CompileOptions.winograd``) lets them use Winograd convolutions.

    Raises
    ------
    PipelineError
        For an unknown ``mode``, a database without ``apply_best``, or a default rule that fails
        (the message names the rule, the op and the function).
    """
    if mode not in SCHEDULE_MODES:
        raise PipelineError(f"compile: schedule={mode!r}; expected one of {list(SCHEDULE_MODES)}")
    if database is not None and not callable(getattr(database, "apply_best", None)):
        raise PipelineError(f"compile: database {type(database).__name__} has no apply_best(module, "
                            "target); pass an mlc.tune database")
    if mode == "none" and database is None:
        return module
    todo = unscheduled_functions(module)
    if not todo:
        return module
    if database is not None:
        if len(todo) != len(module.function_names()):
            raise PipelineError("compile: database= needs a graph module that nobody scheduled yet "
                                f"(functions with loops: "
                                f"{sorted(set(module.function_names()) - set(todo))})")
        # the layout rewrites come before FuseOps, as in the tuner's task extraction
        module = layout_rewrites(module, target, todo, evaluate, winograd)
        module = database.apply_best(FuseOps()(module), target)
        todo = unscheduled_functions(module)
        if mode == "none" or not todo:
            return module
    module = layout_rewrites(module, target, todo, evaluate, winograd)
    if has_op(module, "linalg.matmul"):
        # matmuls of dynamic M get an M == 1 version (a GEMV) chosen at run time
        before = set(module.function_names())
        module = SpecializeUnitRows(todo)(module)
        todo = [n for n in unscheduled_functions(module) if n in todo or n not in before]
    try:
        return default_schedule(module, target, threads, functions=todo)
    except ScheduleError as e:  # a rule could not schedule this op
        raise PipelineError(f"schedule: {e}; compile with schedule='none' to skip default "
                            "schedules") from None
