"""Schedule rules: one rule per op pattern kind, applied to every block of every function.

:func:`apply_default_schedule` classifies each named linalg op from the loop-nest model (the
linalg op name, its iterator kinds and indexing) into a kind of :data:`RULES` and applies that
kind's rule. Each rule is stochastic (TVM MetaSchedule's schedule rules): its choices are
sampling instructions whose candidates and default decisions derive from a
:class:`~mlc_mlir.target.Target` (vector lanes and registers -> register tiles and vector tiles,
L1d/L2 -> cache blocking, cores -> threads). The default schedule is the rules with their
default decisions; the tuner's design space (:class:`~mlc_mlir.tune.space_rules.RuleSpace`) is
the same rules with drawn decisions.
Anchor ops (contractions) run first and take their elementwise epilogues into their tiles, so
a fused primitive from ``FuseOps`` gets its anchor's rule with the epilogue fused. Kinds in
:data:`SKIPPED` are left unscheduled on purpose (each with its reason); they still compile, as
plain loops. Source: TVM MetaSchedule's default schedule rules and dlight's rule table
(``dlight.cpu``), TVM FuseOps pattern kinds.

This module sits in the schedule layer: it reads only the payload and the model, never the
graph layer (op kinds are recomputed from the linalg ops, not from ``graph.op_kinds``).
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Sequence

from ..errors import ScheduleError
from ..ir.module import Module
from ..target import Target
from .loop_nest import OpInfo
from .rules.common import RuleContext
from .rules.conv import schedule_conv2d, schedule_conv2d_nhwc, schedule_grouped_conv2d
from .rules.depthwise import schedule_depthwise_nhwc
from .rules.dynamic_matmul import schedule_dynamic_matmul
from .rules.gpu_rules import apply_gpu_default_schedule
from .rules.matmul import schedule_batch_matmul, schedule_matmul, schedule_mmt4d
from .rules.payload import payload_facts
from .rules.pooling import schedule_pooling, schedule_pooling_nhwc
from .rules.reduction import schedule_reduction
from .rules.row_fused import schedule_rows_or_elementwise
from .schedule import Schedule
from .state import BlockRV

Rule = Callable[[Schedule, BlockRV, RuleContext], None]

#: Op kind -> default rule, in the order kinds are scheduled (anchors before the blocks they
#: could take as epilogues).
RULES: Dict[str, Rule] = {
    "dynamic_matmul": schedule_dynamic_matmul,
    "matmul": schedule_matmul,
    "mmt4d": schedule_mmt4d,
    "batch_matmul": schedule_batch_matmul,
    "conv2d": schedule_conv2d,
    "conv2d_nhwc": schedule_conv2d_nhwc,
    "grouped_conv2d": schedule_grouped_conv2d,
    "depthwise_nhwc": schedule_depthwise_nhwc,
    "pooling": schedule_pooling,
    "pooling_nhwc": schedule_pooling_nhwc,
    "elementwise": schedule_rows_or_elementwise,
    "reduction": schedule_reduction,
}

#: Op kinds deliberately left unscheduled, with the reason.
SKIPPED: Dict[str, str] = {
    "fill": "linalg.fill initializes a reduction's output; the reduction's rule places it "
            "(decompose_reduction) or it runs once as a memset-like loop",
    "other": "no rule for this linalg op",
    "untileable": "an indexing map linalg tiling cannot slice (OpInfo.tiling_blocker: a negative "
                  "coefficient, floordiv or mod); the op runs as plain loops",
    "dynamic": "a convolution or pooling with a dynamic extent (symbolic size): plain loops",
    "identity": "an identity copy (all indexing maps equal, the body yields its arguments, e.g. "
                "a broadcast_to of the same shape): the schedule's cleanup canonicalization "
                "erases it (linalg EraseIdentityLinalgOp), so no rule may hold a handle to it",
}


def classify(info: OpInfo) -> str:
    """The op kind of a named linalg op: a key of :data:`RULES` or :data:`SKIPPED`.

    * an op with an indexing map that linalg tiling cannot slice
      (:attr:`~.loop_nest.OpInfo.tiling_blocker`) -> ``untileable``; an identity copy
      (:attr:`~.loop_nest.OpInfo.identity`) -> ``identity``;
    * ``linalg.fill`` -> ``fill``; ``linalg.matmul`` (3 dims) -> ``matmul``;
      ``linalg.batch_matmul`` -> ``batch_matmul``; ``linalg.mmt4d`` with unit ``M0`` and
      ``K0`` (a pre-packed B) -> ``mmt4d``; ``linalg.conv_2d_nchw_fchw`` -> ``conv2d``;
      ``linalg.conv_2d_nhwc_hwcf`` -> ``conv2d_nhwc``;
      ``linalg.conv_2d_ngchw_gfchw`` -> ``grouped_conv2d``;
      ``linalg.depthwise_conv_2d_nhwc_hwc`` -> ``depthwise_nhwc``; ``linalg.pooling_nchw_*`` ->
      ``pooling``; ``linalg.pooling_nhwc_{max,sum}`` -> ``pooling_nhwc``;
    * any other op whose iterators are all parallel (``linalg.generic`` elementwise/broadcast,
      ``linalg.transpose``, ``linalg.broadcast``, ``linalg.copy``) -> ``elementwise``; with a
      reduction iterator -> ``reduction``;
    * ``linalg.matmul``/``batch_matmul`` with a dynamic extent -> ``dynamic_matmul``; a
      convolution or pooling with one -> ``dynamic`` (elementwise ops and reductions of
      dynamic extents take their kinds' rules).
    """
    op = info.op_name
    if info.tiling_blocker is not None:
        return "untileable"
    if info.identity:
        return "identity"
    if op == "linalg.fill":
        return "fill"
    if any(d.extent is None for d in info.dims):
        if (op, len(info.dims)) in (("linalg.matmul", 3), ("linalg.batch_matmul", 4)):
            return "dynamic_matmul"
        if op.startswith(("linalg.conv", "linalg.pooling", "linalg.depthwise", "linalg.mmt4d")):
            return "dynamic"
    if op == "linalg.matmul" and len(info.dims) == 3:
        return "matmul"
    if op == "linalg.batch_matmul" and len(info.dims) == 4:
        return "batch_matmul"
    if op == "linalg.mmt4d":
        return "mmt4d" if [info.dims[3].extent, info.dims[5].extent] == [1, 1] else "other"
    if op == "linalg.conv_2d_nchw_fchw":
        return "conv2d"
    if op == "linalg.conv_2d_nhwc_hwcf":
        return "conv2d_nhwc"
    if op.startswith("linalg.conv_2d_ngchw"):
        return "grouped_conv2d"
    if op == "linalg.depthwise_conv_2d_nhwc_hwc":
        return "depthwise_nhwc"
    if op.startswith("linalg.pooling_nchw_"):
        return "pooling"
    if op in ("linalg.pooling_nhwc_max", "linalg.pooling_nhwc_sum"):
        return "pooling_nhwc"
    if op.startswith(("linalg.conv", "linalg.pooling", "linalg.depthwise")) or not info.dims:
        return "other"
    if all(d.kind == "parallel" for d in info.dims):
        return "elementwise"
    return "reduction"


def apply_rules(sch: Schedule, ctx: RuleContext, rules: Mapping[str, Rule], label: str) -> None:
    """Apply ``rules[kind]`` to every block of ``sch`` not in ``ctx.claimed``, kind by kind in
    the order of ``rules`` (anchors before the blocks they may take as epilogues). Shared by the
    default schedule and the tuner's design spaces (the same rules, drawing their decisions).

    Raises
    ------
    ScheduleError
        If a rule fails: ``<label> <kind> on '<op>' (<linalg op>) in @<func>: <reason>``.
    """
    kinds = {key: classify(info) for key, info in sch.model.ops.items()}
    for kind, rule in rules.items():
        for key, k in kinds.items():
            if k != kind or key in ctx.claimed:
                continue
            ctx.claimed.add(key)
            block = sch.get_block(key[1], func_name=key[0])
            try:
                rule(sch, block, ctx)
            except ScheduleError as e:
                raise ScheduleError(f"{label} {kind} on '{key[1]}' ({sch.model.ops[key].op_name}) "
                                    f"in @{key[0]}: {e}") from None


def apply_default_schedule(sch: Schedule, target: Target, threads: Optional[int] = None,
                           functions: Optional[Sequence[str]] = None,
                           facts: Optional[Mapping] = None) -> Schedule:
    """Schedule every named linalg op of every function of ``sch``'s payload by its op kind.

    Blocks already retrieved by earlier primitives are left alone, as are kinds in
    :data:`SKIPPED` and epilogues an anchor fused.

    Parameters
    ----------
    sch : Schedule
        A schedule of a graph module or of ``FuseOps`` primitives (float/int dtypes).
    target : Target
        A CPU target; every constant derives from it (see each rule).
    threads : int, optional
        Upper bound on threads per op; default ``target.cores``.
    functions : sequence of str, optional
        Schedule only the blocks of these functions (default: all); the others are left as they
        are (e.g. functions scheduled by hand).
    facts : mapping, optional
        :func:`~.rules.payload.payload_facts` of ``sch.payload``, when the caller has them (a
        design space applies the rules to many schedules of one payload); default: computed.

    Returns
    -------
    Schedule
        ``sch``, with the rules' primitives appended to its trace (their sampling instructions
        with the target-derived default decisions when ``sch`` was built with
        ``defaults=True``, as ``Schedule(mod)`` is).

    Raises
    ------
    ScheduleError
        If ``target`` is not a CPU Target or ``threads < 1``, or a rule fails (the message names
        the rule and the op).
    """
    if isinstance(target, Target) and target.kind == "cuda":
        claimed = {(b.func, b.name) for b in sch.model.blocks}
        if functions is not None:
            claimed.update(key for key in sch.model.ops if key[0] not in set(functions))
        kinds = {key: classify(info) for key, info in sch.model.ops.items()}
        return apply_gpu_default_schedule(sch, target.cuda_arch, kinds, claimed)
    if not isinstance(target, Target) or target.kind != "cpu":
        raise ScheduleError(f"default schedule: target is {target!r}; expected a cpu Target (or a cuda Target)")
    threads = target.cores if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ScheduleError(f"default schedule: threads={threads!r}; expected an int >= 1")
    ctx = RuleContext(target, threads, payload_facts(sch.payload) if facts is None else dict(facts))
    ctx.claimed.update((b.func, b.name) for b in sch.model.blocks)
    if functions is not None:
        ctx.claimed.update(key for key in sch.model.ops if key[0] not in set(functions))
    apply_rules(sch, ctx, RULES, "default rule")
    return sch


def default_schedule(mod: Module, target: Target, threads: Optional[int] = None,
                     functions: Optional[Sequence[str]] = None) -> Module:
    """``mod`` with every op scheduled by :func:`apply_default_schedule` (``sch.mod``).

    Parameters
    ----------
    mod : Module
        Graph functions on static-shaped tensors, fused or not.
    target : Target
    threads : int, optional

    Returns
    -------
    Module
        The scheduled payload (a new module; ``mod`` is not modified).

    Raises
    ------
    ScheduleError
        See :func:`apply_default_schedule`; also when applying the emitted script fails.
    """
    return apply_default_schedule(Schedule(mod), target, threads, functions).mod
