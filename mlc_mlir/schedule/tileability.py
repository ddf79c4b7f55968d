"""Which payloads linalg tiling can take: :func:`tiling_blocker` reads an op's indexing maps
when the loop-nest model is built (``OpInfo.tiling_blocker``), :func:`check_tileable` refuses a
schedule that would transform such a block before any transform op runs (MLIR 22's
``TileCheck`` asserts on a negative index coefficient and the process aborts; a ``floordiv`` /
``mod`` index is sliced as if it were monotone and unit-stepped). :func:`is_identity_copy` marks
the ops that a schedule's cleanup erases (``OpInfo.identity``). Source: MLIR
``Linalg/Utils/Utils.cpp`` (``TileCheck``, ``makeTiledShape``), ``LinalgOps.cpp``
(``EraseIdentityLinalgOp``).
"""

from __future__ import annotations

from typing import List, Optional

from .._mlir import ir
from ..errors import ScheduleError


def _sliceable(e) -> bool:
    """Whether an indexing-map result is a sum of dims times positive constants plus a
    constant: the form whose tiles linalg tiling slices as ``[e(lb), e(lb + ts - 1) + 1)``."""
    if isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)):
        return True
    if isinstance(e, ir.AffineAddExpr):
        return _sliceable(e.lhs) and _sliceable(e.rhs)
    if isinstance(e, ir.AffineMulExpr):
        return isinstance(e.rhs, ir.AffineConstantExpr) and e.rhs.value > 0 and _sliceable(e.lhs)
    return False   # floordiv, mod, ceildiv, symbols


def tiling_blocker(maps: List[ir.AffineMap]) -> Optional[str]:
    """Why linalg tiling (``tile_using_for``/``forall``, ``fuse_into_containing_op``) cannot
    take an op with indexing ``maps``, or None: a result with a non-positive multiplier
    (``-d3 + 3``; MLIR's ``TileCheck`` asserts, the process aborts) or a ``floordiv`` /
    ``mod`` / ``ceildiv`` (its tiles are sliced as if the expression were monotone and
    unit-stepped: wrong elements unless tiles align).

    Parameters
    ----------
    maps : list of ir.AffineMap
        The op's indexing maps, inputs then outputs.
    """
    for k, m in enumerate(maps):
        for e in m.results:
            if not _sliceable(e):
                return f"operand {k} is indexed by '{e}'"
    return None


def check_tileable(model, blk) -> None:
    """Refuse a schedule that would transform a block whose payload linalg tiling cannot slice
    (:attr:`~.loop_nest.OpInfo.tiling_blocker`: a negative index coefficient aborts the process
    in MLIR's ``TileCheck``, a ``floordiv``/``mod`` index is sliced wrongly): such a block takes
    no materialized, parallel, vectorized, bound or unrolled loop, no attachment, cache,
    padding, ``rfactor`` or ``decompose_reduction``; left as it is, it lowers to plain loops.

    ``model`` is the :class:`~.loop_nest.LoopNestModel`, ``blk`` one of its blocks.

    Raises
    ------
    ScheduleError
        ``schedule: block 'flip' (linalg.generic) in @main cannot be tiled: operand 0 is
        indexed by '-d0 + 7' ...``.
    """
    reason = blk.info.tiling_blocker
    if reason is None or blk.kind != "compute":
        return
    moved = [blk.label(p) for p, lp in enumerate(blk.loops)
             if lp.kind != "serial" or lp.unroll is not None or lp.annotations or lp.fused_group is not None]
    touched = moved or model.materialized_loop_ids(blk) or model.epilogues(blk) or \
        model.attached(blk) or blk.compute_at is not None or blk.reverse_compute_at is not None or \
        blk.cache_reads or blk.cache_writes or blk.rfactor is not None or \
        blk.decomposed_at is not None or model.padding_of(blk) is not None
    if touched:
        raise ScheduleError(f"schedule: block '{blk.name}' ({blk.op_name}) in @{blk.func} cannot be "
                            f"tiled: {reason}; linalg tiling slices only sums of dims times positive "
                            "constants, so this block takes no loop transformation (leave its loops "
                            "as get_loops returns them)")


def is_identity_copy(generic) -> bool:
    """Whether a (generalized) ``linalg.generic`` is an identity copy: all its indexing maps are
    equal and its body only yields block arguments. Linalg's canonicalization
    (``EraseIdentityLinalgOp``, run by every ``transform.apply_patterns.canonicalization``)
    replaces such an op by its operands, so no handle to it survives a cleanup."""
    if len(set(str(a) for a in ir.ArrayAttr(generic.attributes["indexing_maps"]))) != 1:
        return False
    body = generic.regions[0].blocks[0]
    ops = list(body.operations)
    return len(ops) == 1 and all(isinstance(v.owner, ir.Block) and v.owner == body
                                 for v in ops[0].operands)
