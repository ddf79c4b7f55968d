"""Attention tasks: the decisions of the fused attention kernel that the ``layout`` stage's
``attention`` step emits (:class:`~mlc_mlir.schedule.rules.attention_knobs.AttentionKnobs`: key
block, query rows per step, decode prefetch distance, threads, exponential, transposes), tuned by measurement like the
convolution algorithm (:mod:`.conv_algorithm`).

One task per distinct attention (:func:`~mlc_mlir.schedule.rules.attention.attention_key`:
the operand types) among the attentions ``layout_passes.FuseAttention`` fuses in a module's
unscheduled functions; its weight is how many attentions share it (the layers of a
transformer). Its module is the fused kernel alone as the public function ``main(q, k, v[,
bias])``; each candidate is that module emitted with the candidate's knobs, compiled as
``mlc.compile`` compiles it and checked against the default knobs' kernel (itself checked
against PyTorch by the tests). Candidates that emit the same code (a prefetch distance where
no single-row loop runs) are measured once. A record holds the knobs as the
``sample_categorical`` of :func:`~mlc_mlir.schedule.rules.attention_knobs.sample_knobs` (the
default's record has the empty trace), so the database's rules (ties keep the default, the
re-measurement of the finalists) apply unchanged, and ``mlc.compile(database=)`` emits the
recorded knobs in its ``attention`` step. Only attentions of static shapes are tasks.
Source: TVM MetaSchedule (the decisions of a kernel as sampling instructions of its trace);
FlashAttention's block sizes tuned per head dim and GPU (Dao et al., 2022).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from .._mlir import func_d, ir
from ..ir.context import new_context
from ..ir.module import Module
from ..ir.walk import find_ops, has_op
from ..pipeline.compile import run_stages
from ..pipeline.layout_passes.fuse_attention import FuseAttention
from ..pipeline.options import CompileOptions
from ..pipeline.scheduling import unscheduled_functions
from ..schedule.rules.attention import attention_key, emit_flash_attention
from ..schedule.rules.attention_knobs import AttentionKnobs, default_knobs, knob_candidates, sample_knobs
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import Target
from .task import Task


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionTask:
    """The knobs of the attentions that share one key (the interface of
    :class:`~.conv_algorithm.AlgorithmTask`, which the tuner measures the same way).

    Attributes
    ----------
    task : Task
        ``workload`` is the attention key; ``module`` the default kernel as ``main``;
        ``weight`` the attentions with that key; ``flops`` ``4 B H Sq Skv D``.
    candidates : tuple of AttentionKnobs
        :func:`~mlc_mlir.schedule.rules.attention_knobs.knob_candidates`, one per distinct kernel.
    default : AttentionKnobs
        The compile's own choice.
    target : Target
    types : tuple of str
        The operand types ``q, k, v[, bias]``.
    scale : float
        The scale of the scores of the first attention with that key.
    texts : dict
        The module text of each candidate, as :func:`extract_attention_tasks` emitted it to
        tell the candidates apart (:meth:`module_for` reads it instead of emitting again).
    """

    task: Task
    candidates: Tuple[AttentionKnobs, ...]
    default: AttentionKnobs
    target: Target
    types: Tuple[str, ...]
    scale: float
    texts: Dict[AttentionKnobs, str] = dataclasses.field(default_factory=dict, repr=False)

    def module_for(self, knobs: AttentionKnobs) -> str:
        """The text of the task's module with the kernel emitted with ``knobs``."""
        text = self.texts.get(knobs)
        return str(kernel_module(self.types, self.scale, self.target, knobs)) if text is None else text

    def trace_for(self, knobs: AttentionKnobs) -> str:
        """The record trace of ``knobs``: empty for the default, else the decisions
        (:func:`~mlc_mlir.schedule.rules.attention_knobs.sample_knobs`)."""
        if knobs == self.default:
            return Trace().as_json()
        sch = Schedule(self.task.module)
        sample_knobs(sch, self.target, self.head_dim, decision=knobs)
        return sch.trace.as_json()

    @property
    def head_dim(self) -> int:
        """``D`` of the queries."""
        with self.task.module.context:
            return ir.RankedTensorType(ir.Type.parse(self.types[0])).shape[3]


def kernel_module(types, scale: float, target: Target, knobs: Optional[AttentionKnobs]) -> Module:
    """A module whose public ``main(q, k, v[, bias]) -> out`` is the fused attention kernel for
    operand types ``types`` (MLIR type strings; a bias or not) emitted with ``knobs`` (None:
    the defaults)."""
    ctx = new_context()
    with ctx, ir.Location.unknown():
        new = ir.Module.create()
        ts = [ir.RankedTensorType(ir.Type.parse(t)) for t in types]
        fn = emit_flash_attention(new.body, "main", ts[0], ts[1], ts[2], ts[3] if len(ts) > 3 else None,
                                  scale, target, knobs)
        del fn.attributes["sym_visibility"]
    return Module(new, ctx).verify()


def _distinct(task_types, scale: float, target: Target, knobs: List[AttentionKnobs],
              default: AttentionKnobs) -> Dict[AttentionKnobs, str]:
    """``knobs`` less those whose kernel is the code of an earlier one (the default first),
    each with its module's text, in that order."""
    seen: Dict[str, AttentionKnobs] = {}
    for kn in [default] + [k for k in knobs if k != default]:
        seen.setdefault(str(kernel_module(task_types, scale, target, kn)), kn)
    return {kn: text for text, kn in seen.items()}


def _calls(mod: Module, callee: str) -> int:
    """Call sites of ``callee`` in ``mod``."""
    with mod.context:
        return sum(ir.FlatSymbolRefAttr(op.attributes["callee"]).value == callee
                   for op in find_ops(mod, "func.call"))


def extract_attention_tasks(mod: Module, target: Target) -> List[AttentionTask]:
    """One :class:`AttentionTask` per distinct static-shape attention that the ``attention``
    layout step fuses in ``mod``'s unscheduled functions (after the ``graph`` stage), in
    program order; attentions with one candidate kernel have no task."""
    _, graph = run_stages(mod, CompileOptions(target=target), until="graph")
    if target.kind != "cpu" or not has_op(graph, "linalg.batch_matmul"):
        return []
    found: Dict[str, Tuple[str, Tuple[str, ...], float]] = {}   # key -> (function name, types, scale)

    def kernel(body, name, q_type, k_type, v_type, bias_type, scale) -> func_d.FuncOp:
        key = attention_key(q_type, k_type, v_type, bias_type)
        if q_type.has_static_shape and key not in found:
            found[key] = (name, tuple(str(t) for t in (q_type, k_type, v_type, bias_type) if t is not None), scale)
        return emit_flash_attention(body, name, q_type, k_type, v_type, bias_type, scale, target)

    fused = FuseAttention(kernel, unscheduled_functions(graph))(graph.clone())
    weights: Dict[str, int] = {}
    for key, (name, _, _) in found.items():
        weights[key] = weights.get(key, 0) + _calls(fused, name)
    out = []
    for key, (_, types, scale) in found.items():
        module = kernel_module(types, scale, target, None)
        with module.context:
            q = ir.RankedTensorType(ir.Type.parse(types[0]))
            k = ir.RankedTensorType(ir.Type.parse(types[1]))
        (b, h, sq, d), skv = q.shape, k.shape[2]
        default = default_knobs(target, d)
        texts = _distinct(types, scale, target, knob_candidates(target, d), default)
        if len(texts) < 2:
            continue
        task = Task("flash_attention", key, module, "main", weights[key], 4.0 * b * h * sq * skv * d)
        out.append(AttentionTask(task, tuple(texts), default, target, types, scale, texts))
    return out
