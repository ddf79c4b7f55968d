"""Rule for a row chain: the reductions over the innermost dim of a row (softmax's max and
sum, layer_norm's mean and variance sums), the per-row ops on their results, the row's
elementwise values that a reduction and the output read (softmax's ``exp(x - max)``) and the
elementwise op that writes the row (``FuseOps`` puts them in one unit: ``graph.fuse_ops``'s
``_row_edge``). The output's rows are split over threads and each row is computed whole before
the next: every reduction is computed at the row loop (``compute_at``), the row stays in the
cache between its passes (read from memory once, written once), and each pass is vectorized,
the reductions with one accumulator per lane of a few vectors (``rfactor``). Source: the
per-row softmax and layer_norm kernels of PyTorch's CPU backend and oneDNN (one row at a time,
vectorized passes); TVM's ``compute_at`` of a softmax's reductions into its output's row loop;
IREE's tile-and-fuse of a softmax dispatch."""

from __future__ import annotations

from typing import List, Optional

from ..loop_nest import OpInfo
from ..schedule import Schedule
from ..state import BlockRV
from .common import (RuleContext, categorical, parallelize_first, vector_candidates, vector_tile)
from .elementwise import contiguous_last, schedule_elementwise


def row_chain(sch: Schedule, out: OpInfo, ctx: RuleContext) -> Optional[List[OpInfo]]:
    """The other named ops of ``out``'s function, in program order, when they and ``out`` form a
    row chain, else None. ``out`` is an all-parallel op of rank ``n`` read and written along its
    innermost dim, consumed by no other op of its function; every other op (``linalg.fill``
    inits aside) feeds ``out`` (through named ops), is unclaimed and is either a reduction over exactly that innermost dim (the
    innermost dim of its first input, the others kept in order), an all-parallel op of rank
    ``n - 1`` (a per-row value) or an all-parallel op of rank ``n`` (a row's elementwise values,
    softmax's ``exp(x - max)``, read by the row's sum and by ``out``); at least one is a
    reduction; none is an identity copy (the cleanup erases it). The row length is static (the
    row count may be dynamic). Reads the loop-nest model only (records nothing in the trace)."""
    n = len(out.dims)
    if n < 2 or sch.model.index.consumers(out.func, out.name) or not contiguous_last(out) or \
            out.dims[-1].extent is None:
        return None   # a dynamic row length: the ops are scheduled one by one
    ops = [info for info in sch.model.index.of_func(out.func)
           if info.name != out.name and info.op_name != "linalg.fill"]
    reductions = 0
    for info in ops:
        if (info.func, info.name) in ctx.claimed or info.op_name != "linalg.generic" or info.identity:
            return None
        kinds = [d.kind for d in info.dims]
        if all(k == "parallel" for k in kinds):
            if len(kinds) == n and tuple(info.out_dims) == tuple(range(n)):
                continue   # a row's elementwise values, read by the row's reduction (exp(x - max))
            if len(kinds) != n - 1:
                return None
            continue
        first = info.operand_dims[0] if info.num_inputs else ()
        if len(kinds) != n or kinds[:-1] != ["parallel"] * (n - 1) or kinds[-1] != "reduction" or \
                tuple(first) != tuple(range(n)) or tuple(info.out_dims) != tuple(range(n - 1)):
            return None
        fact = ctx.facts.get((info.func, info.name))
        if fact is None or fact.num_results != 1 or fact.reads_index or not fact.simple_maps:
            return None
        reductions += 1
    if not reductions:
        return None
    # every op of the chain feeds the output through named ops (not through a reshape)
    infos = {info.name: info for info in ops}
    reached, todo = set(), list(out.producers)
    while todo:
        nm = todo.pop()
        if nm in infos and nm not in reached:
            reached.add(nm)
            todo.extend(infos[nm].producers)
    if reached != set(infos):
        return None
    return ops


def schedule_row_fused(sch: Schedule, block: BlockRV, ctx: RuleContext) -> bool:
    """Schedule the row chain ending in ``block`` (:func:`row_chain`); False (nothing recorded)
    when ``block`` does not end one.

    * ``block`` (the output, ``rows... x C``): its row dims are split over sampled threads
      (:func:`~.common.parallelize_first`), ``C`` into ``(C / V, V)`` and vectorized, ``V``
      from :func:`~.common.vector_candidates` (default :func:`~.common.vector_tile`; a dynamic
      ``C``: a masked last tile).
    * Each reduction: ``C`` split into ``(C / V, V)`` and factorized (``rfactor``, V partial
      results in vector registers, reduced once per row), vectorized; ``V`` sampled as for the
      output (1: a plain row loop). A row's elementwise values: ``C`` split and vectorized the
      same way, computed once per row into a buffer of one row (the exponential is not
      recomputed by each reader). Per-row ops stay scalar.
    * Every op of the chain is computed at the output's innermost row loop (``compute_at``),
      consumers first, so a row's passes run back to back on the row while it is in the cache.

    Shapes: rank >= 2, any row count (static or dynamic), a static row length; dtypes: floats.
    """
    out = sch.get(block)
    infos = row_chain(sch, out.info, ctx)
    if infos is None:
        return False
    chain = [sch.get(sch.get_block(info.name, func_name=out.func)) for info in infos]
    n = len(out.dims)
    c = out.dims[-1].extent
    for blk in chain:
        ctx.claimed.add((blk.func, blk.name))
        if len(blk.dims) != n:
            continue
        cands = [v for v in vector_candidates(ctx, blk, c) if c is None or v < c]
        dv = vector_tile(ctx, blk, c)
        v = int(categorical(sch, [1] + cands, dv if dv in cands else 1)) if cands else 1
        if v > 1:
            rb = sch.get_block(blk.name, func_name=blk.func)
            _, k1 = sch.split(sch.get_loops(rb)[-1], [None, v])
            if blk.dims[-1].kind == "reduction":
                sch.rfactor(k1)
            sch.vectorize(k1)
    loops = sch.get_loops(block)
    extents = [d.extent for d in out.dims]
    cands = vector_candidates(ctx, out, c)
    inner = None
    if cands:
        v = categorical(sch, cands, vector_tile(ctx, out, c))
        loops[-1], inner = sch.split(loops[-1], [None, v])
        extents[-1] = None if c is None else c // v
    parallelize_first(sch, ctx, out, loops[:-1], extents[:-1])
    row_loops = sch.get_loops(block)
    # the innermost loop of a row dim (before C's loops): each of its iterations is one row
    target = row_loops[len(row_loops) - (3 if inner is not None else 2)]
    for blk in reversed(chain):
        sch.compute_at(sch.get_block(blk.name, func_name=blk.func), target)
    if inner is not None:
        sch.vectorize(inner)
    return True


def schedule_rows_or_elementwise(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """The rule of all-parallel ops: :func:`schedule_row_fused` when ``block`` ends a row chain,
    else :func:`~.elementwise.schedule_elementwise`. It runs before the reduction rule, which
    would otherwise take the chain's reductions one by one. A per-row op of a chain (visited
    before the chain's output) schedules the chain from its output."""
    blk = sch.get(block)
    if schedule_row_fused(sch, block, ctx):
        return
    if len(blk.dims) >= 1:
        key = (blk.func, blk.name)
        ends = [info for info in sch.model.index.of_func(blk.func)
                if info.name != blk.name and (blk.func, info.name) not in ctx.claimed
                and info.op_name == "linalg.generic" and all(d.kind == "parallel" for d in info.dims)
                and len(info.dims) in (len(blk.dims), len(blk.dims) + 1)]
        ctx.claimed.discard(key)
        for end in ends:
            ctx.claimed.add((blk.func, end.name))
            # the model answers first: only the output of a chain is looked up (and recorded)
            if row_chain(sch, end, ctx) is not None and \
                    schedule_row_fused(sch, sch.get_block(end.name, func_name=blk.func), ctx):
                break
            ctx.claimed.discard((blk.func, end.name))
        if key in ctx.claimed:
            return
        ctx.claimed.add(key)
    schedule_elementwise(sch, block, ctx)
