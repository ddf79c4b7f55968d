"""Packed operand tiles (``cache_read``) in the transform script of
:mod:`~mlc_mlir.schedule.transform_script`: each packed tile is a ``structured.pad`` with
``nofold`` on the operand (a private copy of its tile), hoisted out of the loops inside its
``compute_at`` loop (``structured.hoist_pad``, transposed where the register tile reads it
across its rows) and vectorized: one row at a time, or, packed transposed, in blocks that
read the operand directly (A's ``MR x kb`` micro-panel blocks, B's ``8 x 8`` transposes),
the pad fused into each block. ``em`` is the transform script's emitter
(its loop handles, model, matching and cleanup). Source: BLIS/Goto packed panels; MLIR's
``transform.structured.pad`` + ``hoist_pad`` (the IREE CPU codegen packing); TVM's
``cache_read`` + ``compute_at``.
"""

from __future__ import annotations

import itertools
import math

from .._mlir import ir, loop_transform_d, structured_transform_d, transform_d
from ..ir import dtypes
from ..ir.transform_values import any_op
from .loop_nest import Block
from .partial_tiles import peel_packing


def emit_pad(em, blk: Block, op: ir.Value, idx: int, cid: int, pos: int, licm: bool = False) -> ir.Value:
    """``structured.pad`` with ``nofold`` on operand ``idx`` of ``blk``'s op ``op`` (a packed copy
    of its tile inside loop ``pos``, for the cache block ``cid``); records the pad for
    :func:`emit_cache_reads` and returns the padded op. With ``licm`` (an operand whose tile
    the loops between the cache's ``compute_at`` and ``pos`` do not index, the op fused into
    an epilogue's loops) the copy is moved out of those loops by loop-invariant code motion
    rather than ``hoist_pad``, which packs only slices taken inside the loops it crosses."""
    zeros = em.zeros(blk)
    nofold = [1 if i == idx else 0 for i in range(len(zeros))]
    # with partial tiles, only the dims of the packed operand are padded: its partial edge
    # is zero-filled in the packed tile, and the other operands keep their partial tiles
    # (no padded copy of A's rows per panel of B); the peeled loops make them full
    # (an edge tile of C padded with them is written back into C where it came from)
    partial = bool(blk.partial_dims())
    dims = sorted(set(blk.info.operand_dims[idx])) if partial else range(len(blk.dims))
    pad = structured_transform_d.PadOp(
        op, padding_values=zeros, padding_dimensions=list(dims), nofold_flags=nofold,
        copy_back_op="bufferization.materialize_in_destination" if partial else "none")
    cache = em.model.cache_block(cid)
    n = 0
    if cache.compute_at is not None:
        ca = blk.loop_index(cache.compute_at)
        n = len({id(em.loop_handles[q.id]) for q in blk.loops[ca + 1:pos + 1]
                 if q.id in em.loop_handles})
    operand_pad = transform_d.GetProducerOfOperand(any_op(), pad.padded, idx).result
    # the packed tile: the operand's extent along each of its dims inside loop `pos`
    tile = [math.prod(q.extent for q in blk.loops[pos + 1:] if q.dim == d)
            for d in blk.info.operand_dims[idx]]
    perm = _pack_transpose(blk, idx) if n and not licm else None
    em.pads.append((blk.func, operand_pad, n, tile, perm, blk, pos, idx, licm))
    return pad.padded


def emit_cache_reads(em) -> None:
    """Hoist each packing out of the loops inside its compute_at loop (``hoist_pad``, after
    merging slices and canonicalizing as it requires) and vectorize the packing copy."""
    for func in sorted({p[0] for p in em.pads}):
        em.cleanup(em.func(func))
    for func, pad, n, tile, perm, blk, pos, idx, licm in em.pads:
        if licm:   # out of its innermost loop, then the next: the pad itself moves
            for _ in range(n):
                transform_d.apply_licm(transform_d.GetParentOp(
                    any_op(), pad, op_name="scf.for", nth_parent=1).parent)
            n = 0
        elif n:
            pad = structured_transform_d.HoistPadOp(any_op(), pad, n, transpose=perm).transformed
        partial = n and set(blk.info.operand_dims[idx]) & set(blk.partial_dims())
        if perm is not None:
            _read_back(em, blk, pos, tile, idx)
            # the packing loop over (micro-)panels peeled: whole ones static, unmasked
            a_tile = blk.loops[-1].dim not in blk.info.operand_dims[idx]
            for p in peel_packing(pad) if partial else [pad]:
                if a_tile:
                    _broadcast_panel_pack(p, tile, perm)
                else:
                    _square_block_pack(em, blk.func, p, tile, blk.info.dtypes[idx])
            continue
        pads = [pad]
        if partial and perm is None:
            pads = peel_packing(pad)
        for i, pad in enumerate(pads):
            if len(tile) > 1:   # one row at a time, as vectorize_rows (a KC x NR panel at
                # once unrolls into KC loads and stores: 10x the code and compile time)
                rows = structured_transform_d.TileUsingForOp(pad, sizes=[1] * (len(tile) - 1) + [0])
                pad = rows.tiled_linalg_op
                if len(pads) > 1 and i == 0:   # a row of a full panel: a plain slice copy
                    structured_transform_d.VectorizeOp(structured_transform_d.MatchOp(
                        any_op(), rows.loops[0],
                        ops=ir.ArrayAttr.get([ir.StringAttr.get("tensor.insert_slice")])).result)
            structured_transform_d.VectorizeOp(pad, [1] * (len(tile) - 1) + tile[-1:])


def _read_back(em, blk: Block, pos: int, tile: list, idx: int) -> None:
    """A tile packed transposed (``hoist_pad ... transpose by``) is written by a
    ``linalg.transpose`` in the packing loop and read back through a ``linalg.transpose`` in
    loop ``pos``: the read-back one (matched by the tile's type: a ``dense`` that packs A and
    B has both of theirs in the loops of A's tile) is fused into the loops inside ``pos`` down
    to the register tile and vectorized there, where it cancels against the transposed read of
    the contraction (the tile reads one contiguous packed row)."""
    elem = dtypes.to_ir_type(blk.info.dtypes[idx])
    back = structured_transform_d.MatchOp(
        any_op(), em.loop_handles[blk.loops[pos].id],
        ops=ir.ArrayAttr.get([ir.StringAttr.get("linalg.transpose")]),
        filter_result_type=ir.RankedTensorType.get(tile, elem)).result
    inner = []
    for q in blk.loops[pos + 1:]:
        h = em.loop_handles.get(q.id)
        if h is not None and (not inner or inner[-1] is not h):
            inner.append(h)
    structured_transform_d.VectorizeOp(em.fuse_into(back, inner))


def _square_block_pack(em, func: str, hoisted: ir.Value, tile: list, dtype: str) -> None:
    """The packing transpose of a B panel (``dense``'s ``(N, K)`` B packed as ``(K, NR)``)
    tiled into square blocks of :data:`_TRANSPOSE_BLOCK` with the pad fused into each block,
    so a block is one ``8 x 8`` read of B's rows (masked past a partial panel's last row or
    K's end), one ``vector.transpose`` (shuffles) and one write into the packed panel; no
    ``NR x KC`` copy of the rows first. A dim the block does not divide (KC = 450) ends in
    one partial block: its loop is peeled (``transform.loop.peel``), so the whole blocks are
    static and unmasked after the cleanup of ``func``. Source: BLIS's ``packm`` of a
    transposed B into ``NR``-wide panels (Van Zee & van de Geijn, TOMS 2015)."""
    packer = transform_d.GetConsumersOfResult(any_op(), hoisted, 0).result
    out = list(reversed(tile))   # the transpose iterates over its (K, NR) result
    block = [min(e, _TRANSPOSE_BLOCK) for e in out]
    tiled = structured_transform_d.TileUsingForOp(packer, sizes=block)
    fused = hoisted
    for loop in tiled.loops:
        fused = structured_transform_d.FuseIntoContainingOp(fused, loop).fused_op
    # the block's ops are found again in every copy the peeling makes, static after the
    # cleanup (vectorized before, a masked write of a dynamic tile folds to a static type)
    for h in (fused, tiled.tiled_linalg_op):
        transform_d.AnnotateOp(h, _BLOCK_MARK)
    for loop, e, b in reversed(list(zip(tiled.loops, out, block))):   # innermost first
        if e % b:
            loop_transform_d.LoopPeelOp(any_op(), any_op(), transform_d.CastOp(
                transform_d.OperationType.get("scf.for"), loop).result)
    em.cleanup(em.func(func))
    # each static block shape (whole, or the remainder along a peeled dim) vectorized as it
    # is, unmasked; a block still dynamic (a partial panel's rows) masked to a whole block
    shapes = itertools.product(*[sorted({b, e % b} - {0}) for e, b in zip(out, block)])
    mark = ir.DictAttr.get({_BLOCK_MARK: ir.UnitAttr.get()})
    elem = dtypes.to_ir_type(dtype)
    for shape in [list(s) for s in shapes] + [None]:
        for name, sizes in (("tensor.pad", (shape or block)[::-1]), ("linalg.transpose", shape or block)):
            kw = {} if shape is None else {"filter_result_type": ir.RankedTensorType.get(sizes, elem)}
            structured_transform_d.VectorizeOp(structured_transform_d.MatchOp(
                any_op(), em.func(func), ops=ir.ArrayAttr.get([ir.StringAttr.get(name)]),
                op_attrs=mark, **kw).result, sizes)


#: Attribute marking the ops of a packing block of :func:`_square_block_pack` across peeling.
_BLOCK_MARK = "mlc.pack_block"


def _broadcast_panel_pack(hoisted: ir.Value, tile: list, perm: list) -> None:
    """The packing of an operand the register tile broadcasts (A's ``MR x KC`` tile packed as
    a ``KC x MR`` micro-panel): the packing transpose tiled along K in blocks of
    ``gcd(KC, 8)`` steps with the pad fused into each block, so a block is one ``MR x kb``
    read of A's rows (masked in the last, partial micro-panel), one ``vector.transpose`` and
    one contiguous ``kb x MR`` write; no ``MR x KC`` copy of the rows first (a KC-wide row
    vector: scalarized where masked). Source: BLIS's ``packm`` of A into ``MR``-wide
    micro-panels (Van Zee & van de Geijn, TOMS 2015)."""
    packer = transform_d.GetConsumersOfResult(any_op(), hoisted, 0).result
    out = [tile[p] for p in perm]
    kb = math.gcd(out[0], _TRANSPOSE_BLOCK)
    tiled = structured_transform_d.TileUsingForOp(packer, sizes=[kb] + [0] * (len(out) - 1))
    fused = structured_transform_d.FuseIntoContainingOp(hoisted, tiled.loops[0]).fused_op
    sizes = [kb] + out[1:]
    structured_transform_d.VectorizeOp(fused, [sizes[perm.index(d)] for d in range(len(sizes))])
    structured_transform_d.VectorizeOp(tiled.tiled_linalg_op)


#: Side of the square blocks a transposed packing copy is vectorized in: an 8 x 8 block of
#: 32-bit elements is one ``vector.transpose`` of 8 registers on AVX2 (shuffles), half a
#: register row on AVX-512; larger blocks unroll into spills. A code-shape choice.
_TRANSPOSE_BLOCK = 8


def _pack_transpose(blk: Block, idx: int):
    """The permutation of a packed 2-d tile (``hoist_pad ... transpose by``) that puts the dim
    of the innermost loop over the operand's dims last (for B the vectorized NR columns, for
    A the MR rows of the register tile), so the register tile reads the packed panel with unit
    stride: ``dense``'s B is ``(N, K)`` and its panels are packed as ``(K, NR)``, as BLIS packs
    a transposed B; A ``(M, K)`` is packed as ``(K, MR)`` micro-panels, as BLIS packs A. None
    when that dim is already last."""
    dims = list(blk.info.operand_dims[idx])
    inner = next((q.dim for q in reversed(blk.loops) if q.dim in dims), None)
    if len(dims) != 2 or inner is None or dims[-1] == inner:
        return None
    return [1, 0]
