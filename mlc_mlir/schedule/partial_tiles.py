"""Partial tiles (imperfect ``split``) realized as full tiles plus peeled remainders, for
:mod:`~mlc_mlir.schedule.transform_script`: the loops over partial tiles of a vectorized op are
peeled (``transform.loop.peel``) so that the main loops run static, unmasked tiles, and a packing
loop over partial panels is peeled so that the full panels are plain vector copies. Source: MLIR
``scf::peelForLoopAndSimplifyBounds``; TVM's imperfect ``split`` with loop partitioning.
"""

from __future__ import annotations

from typing import List

from .._mlir import ir, loop_transform_d, structured_transform_d, transform_d
from ..ir.transform_values import any_op
from .loop_nest import Block, materializes

#: Attribute prefix marking the loops inside a peeled loop (``<prefix><loop id>``), so that
#: every copy the peeling makes is found again (unrolled, annotated).
_LOOP_MARK = "mlc.loop_"
#: Attribute prefix marking the op of a block (``<prefix><block id>``) across the peeling.
_OP_MARK = "mlc.op_"


def peel_packing(pad: ir.Value) -> List[ir.Value]:
    """Peel the packing loop (over panels) around the hoisted ``tensor.pad`` ``pad`` of a
    partial operand: returns the pads of the full panels (zero padding: a plain copy, each
    row one vector) and of the last, partial one (zero-filled past the edge: masked, guarded).
    """
    loop = transform_d.GetParentOp(transform_d.OperationType.get("scf.for"), pad,
                                   op_name="scf.for").result
    peeled = loop_transform_d.LoopPeelOp(any_op(), any_op(), loop)
    return [structured_transform_d.MatchOp(
        any_op(), h, ops=ir.ArrayAttr.get([ir.StringAttr.get("tensor.pad")])).result
        for h in (peeled.peeled_loop, peeled.remainder_loop)]


def peel_partial(em, b: Block, h: ir.Value):
    """The vectorization of ``b``'s partial tiles: ``(handle, vector_sizes)``; ``em`` is the
    transform script's emitter (loop handles, model, cleanup).

    A block with no cache write or rfactor and no padding along a partial dim, whose init (if
    decomposed) and epilogues each sit either inside every peeled loop (cloned with it: the
    NHWC convolution's row tile with its batch norm and relu, ``schedule_conv2d_nhwc``), outside
    every loop of the partial dims (whole along them), or, for the init, where its rows are
    whole, and whose partial dims each have a
    materialized ``scf.for`` outside the vectorized tile (the innermost such loop per dim, with
    static loops inside it; a partial dim whose innermost such loop steps by 1, a thread's
    shorter chunk of rows, has full tiles and is not peeled), gets those loops peeled, innermost first (``transform.loop.peel``:
    the main loop's tiles are full, static after canonicalization). Each remainder's tiles are
    split into slices of 1 along the peeled dim (static, unmasked) where the dim's extent is
    dynamic or tiled by an outer loop too, unless a packed operand's tile is padded along it
    inside the loop (B's panel: the remainder is one full-width tile written back in place);
    the remainder of a static extent tiled once is one static tile (the only remainder a cloned
    init or epilogue takes). The loops inside the
    peeled ones (the unrolled k loop) and the op (a decomposed convolution included) are found
    again in every copy; the epilogues' handles are matched again. Returns the handle of
    every copy of the op and None; otherwise ``h`` and the full tile's sizes (masked
    vectorization)."""
    vpos = next(i for i, lp in enumerate(b.loops) if lp.kind == "vectorized")
    sizes = b.vector_sizes(vpos)
    peel = {}
    for p in range(vpos):
        lp = b.loops[p]
        if lp.dim in b.partial_dims() and materializes(lp):
            peel[lp.dim] = p   # the innermost materialized loop of each partial dim
    # a partial dim iterated one element at a time (a thread's shorter chunk of rows) has
    # full tiles of 1: nothing to peel
    unit = {d for d, p in peel.items() if b.step(p) == 1}
    peel = {d: p for d, p in peel.items() if d not in unit}
    init = em.model.init_of(b)
    epilogues = em.model.epilogues(b)
    # the tiles of the init and the epilogues, by the position of their first loop: full
    # (static) across the peeling where they sit inside every peeled loop (cloned with it) or
    # outside every loop of the partial dims (whole along them)
    tiles = [b.loop_index(e.reverse_compute_at) + 1 for e in epilogues]
    row = b.info.out_dims[-1] if b.info.out_dims else None
    # an init whose rows are whole (no loop over the row dim outside it) is written a
    # full row at a time whatever the partial tiles around it
    whole_rows = init is None or (row is not None and not any(
        q.dim == row and materializes(q) for q in b.loops[:b.loop_index(b.decomposed_at)]))
    if init is not None and not whole_rows:
        tiles.append(b.loop_index(b.decomposed_at))
    inside = max(peel.values(), default=vpos) + 1
    cloned = any(a >= inside for a in tiles)
    padding = em.model.padding_of(b)
    simple = all(a >= inside or not any(q.dim in peel for q in b.loops[:a]) for a in tiles) \
        and b.rfactor is None and not b.cache_writes \
        and (padding is None or all(padding[d] == 1 for d in b.partial_dims()))
    # dims a packed operand's tile is padded along inside the peeled loop: static there
    padded = {d for c in b.cache_reads for d in b.info.operand_dims[c.operand]
              if em.model.cache_position(b, c.operand) >= 0}
    # a cloned init or epilogue is static in the remainder only where the peeled dim is a static
    # extent tiled once (the remainder is one tile; slices of 1 would leave them partial)
    ok = simple and peel and set(peel) == set(b.partial_dims()) - unit and all(
        (not cloned or b.dims[b.loops[p].dim].extent is not None and
         not any(q.dim == b.loops[p].dim for q in b.loops[:p])) and
        b.loops[p].kind == "serial" and b.loops[p].fused_group is None and
        b.loops[p].id in em.loop_handles and
        all(q.extent is not None for q in b.loops[p + 1:] if q.dim == b.loops[p].dim)
        for p in peel.values())
    if not ok:
        return h, sizes
    # the loops inside a peeled one are cloned with it: marked before, matched after
    inner = {b.loops[q].id for q in range(min(peel.values()) + 1, vpos)
             if b.loops[q].id in em.loop_handles}
    for lid in inner:
        transform_d.AnnotateOp(em.loop_handles[lid], f"{_LOOP_MARK}{lid}")
    # the op as it is now (a decomposed convolution is a new op, without the name attribute)
    mark = ir.DictAttr.get({f"{_OP_MARK}{b.id}": ir.UnitAttr.get()})
    transform_d.AnnotateOp(h, f"{_OP_MARK}{b.id}")
    for d, p in sorted(peel.items(), key=lambda dp: -dp[1]):
        loop = transform_d.CastOp(transform_d.OperationType.get("scf.for"),
                                  em.loop_handles[b.loops[p].id]).result
        rem = loop_transform_d.LoopPeelOp(any_op(), any_op(), loop)
        # the loop's handle was consumed: its annotations go to the main (full-tile) loop
        em.loop_handles[b.loops[p].id] = rem.peeled_loop
        if d in padded and em.model.cache_position(b, next(
                c.operand for c in b.cache_reads if d in b.info.operand_dims[c.operand])) >= p:
            continue   # the remainder's tile is padded to full size along d
        if b.dims[d].extent is not None and not any(q.dim == d for q in b.loops[:p]):
            continue   # a static extent tiled once: the remainder tile is static (one vector op)
        rop = structured_transform_d.MatchOp(any_op(), rem.remainder_loop, op_attrs=mark).result
        structured_transform_d.TileUsingForOp(rop, sizes=[1 if i == d else 0 for i in range(len(b.dims))])
    # no slice merging: a peeled loop left with one full tile folds away, and merging its slice
    # of the output tile into a slice of the enclosing tile's destination leaves two slices
    # one-shot bufferization cannot write in place (a read-after-write conflict)
    em.cleanup(em.func(b.func), merge_slices=False)
    for e in epilogues:   # their handles were consumed with the loop: every copy
        em.op_handles[e.id] = em.match(e)
    for lid in inner:
        em.loop_handles[lid] = structured_transform_d.MatchOp(
            any_op(), em.func(b.func),
            op_attrs=ir.DictAttr.get({f"{_LOOP_MARK}{lid}": ir.UnitAttr.get()})).result
    return structured_transform_d.MatchOp(any_op(), em.func(b.func), op_attrs=mark).result, None

