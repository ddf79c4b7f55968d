"""Epilogue detection for anchor ops (contractions, convolutions): the chain of elementwise
consumers that can run on each output tile while it is hot (``reverse_compute_at``). Source:
TVM FuseOps (out-elementwise-fusable + elementwise), oneDNN post-ops."""

from __future__ import annotations

from typing import List

from ..loop_nest import Block
from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext


def _is_epilogue(anchor: Block, cand: Block) -> bool:
    """``cand`` is an elementwise op over the anchor's output shape that reads every full-rank
    operand in the identity order (no transpose) and broadcasts the others (a bias)."""
    n = len(cand.dims)
    out_shape = anchor.info.operand_shapes[anchor.info.num_inputs]
    shapes = cand.info.operand_shapes
    if any(d.kind != "parallel" for d in cand.dims) or len(shapes) <= cand.info.num_inputs \
            or shapes[cand.info.num_inputs] != out_shape:
        return False
    for dims in cand.info.operand_dims:
        if len(dims) == n and list(dims) != list(range(n)):
            return False
        if list(dims) != sorted(dims):
            return False
    return True


def epilogue_chain(sch: Schedule, anchor: Block, ctx: RuleContext) -> List[str]:
    """Names of the elementwise consumers fusable into ``anchor``'s tiles, producer to consumer:
    each link has a single use (its only consumer is the next link), the same output shape and
    no transposed operand; an identity copy ends the chain (the cleanup erases it)."""
    chain: List[str] = []
    cur = anchor
    while True:
        fact = ctx.fact(cur)
        cons = sch.model.index.consumers(cur.func, cur.name)
        if fact is None or fact.uses != 1 or fact.num_results != 1 or len(cons) != 1:
            return chain
        key = (cur.func, cons[0])
        info = sch.model.ops.get(key)
        if info is None or key in ctx.claimed or info.op_name == "linalg.fill" or info.identity:
            return chain
        probe = Block(-1, info.name, info, [])
        if not _is_epilogue(anchor, probe):
            return chain
        chain.append(info.name)
        cur = probe


def epilogue_reads(sch: Schedule, anchor: Block, ctx: RuleContext) -> int:
    """How many tensors of ``anchor``'s output shape the epilogue chain of ``anchor``
    (:func:`epilogue_chain`) reads besides the anchor's own result (a residual add: one), so
    a rule can count each tile's memory traffic with them (oneDNN's binary post-op)."""
    n = len(anchor.info.operand_shapes[anchor.info.num_inputs])
    reads = 0
    for name in epilogue_chain(sch, anchor, ctx):
        info = sch.model.ops[(anchor.func, name)]
        reads += max(0, sum(len(d) == n for d in info.operand_dims[:info.num_inputs]) - 1)
    return reads


def claim_epilogues(sch: Schedule, anchor: Block, ctx: RuleContext) -> List[BlockRV]:
    """Block handles of :func:`epilogue_chain` of ``anchor``, claimed in ``ctx`` (no other rule
    schedules them): the caller fuses them into the anchor's tiles with ``reverse_compute_at``."""
    epi = [sch.get_block(e, func_name=anchor.func) for e in epilogue_chain(sch, anchor, ctx)]
    ctx.claimed.update((anchor.func, sch.get(e).name) for e in epi)
    return epi
