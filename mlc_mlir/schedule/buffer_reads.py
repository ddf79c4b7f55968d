"""Reads of one buffer through several operands of a linalg op (``A[i]``, ``A[i + 1]``,
``A[i + 2]`` of a window sum): which operands they are and the region their union covers, the
region a ``shared`` cache stages (TVM ``cache_read`` + ``compute_at``: the union of the block's
buffer accesses, halo included)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from .._mlir import ir


def dim_offset(expr) -> Tuple[Optional[int], int]:
    """``(d, c)`` of an affine result ``d + c`` (``(d, 0)`` for ``d``); ``(None, 0)`` otherwise."""
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position, 0
    if isinstance(expr, ir.AffineAddExpr):
        for a, b in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            if isinstance(a, ir.AffineDimExpr) and isinstance(b, ir.AffineConstantExpr):
                return a.position, b.value
    return None, 0


def buffer_of(v) -> Tuple[object, Tuple[int, ...]]:
    """``(root value, static offsets)`` of ``v`` seen through static, unit-stride, rank-keeping
    ``tensor.extract_slice`` ops (the slices the ``te`` frontend makes of a shifted read)."""
    rank = len(v.type.shape) if isinstance(v.type, ir.ShapedType) else 0
    offsets = [0] * rank
    while not isinstance(v.owner, ir.Block) and v.owner.name == "tensor.extract_slice":
        op = v.owner.opview
        offs, strides = list(op.static_offsets), list(op.static_strides)
        if len(offs) != rank or any(o < 0 for o in offs) or any(s != 1 for s in strides) or \
                len(op.offsets) or len(op.strides) or len(op.source.type.shape) != rank:
            break
        offsets = [a + b for a, b in zip(offsets, offs)]
        v = op.source
    return v, tuple(offsets)


def sources(operands) -> Tuple[int, ...]:
    """For each of ``operands`` (``ir.Value``), the first operand reading the same buffer
    (itself if none): :attr:`OpInfo.operand_sources <.loop_nest.OpInfo>`."""
    bufs = [buffer_of(v) for v in operands]
    return tuple(next(k for k, w in enumerate(bufs) if w[0] == v[0]) for v in bufs)


def offsets(maps, operands) -> Tuple[Tuple[Tuple[Optional[int], int], ...], ...]:
    """For each operand, each result of its indexing map as ``(dim, constant)`` in its
    buffer's coordinates (:func:`dim_offset`, plus the static offset of the slices it reads
    through): :attr:`OpInfo.operand_offsets <.loop_nest.OpInfo>`."""
    out = []
    for m, (_, base) in zip(maps, map(buffer_of, operands)):
        row = [dim_offset(e) for e in m.results]
        out.append(tuple((d, c + (base[r] if r < len(base) else 0)) for r, (d, c) in enumerate(row)))
    return tuple(out)


def _dims(info, k: int) -> Optional[Tuple[int, ...]]:
    """The dim indexing each dim of operand ``k`` when each index is ``d + c``, else None."""
    dims = tuple(d for d, _ in info.operand_offsets[k]) if info.operand_offsets else None
    return None if dims is None or None in dims else dims


def buffer_reads(info, operand: int) -> List[int]:
    """The input operands of ``info`` (an :class:`~.loop_nest.OpInfo`) that read the buffer of
    input ``operand`` at constant offsets from it (the same dim indexes each of its dims:
    ``A[i]``, ``A[i + 1]``, ``A[i + 2]``), in operand order; ``[operand]`` when no other does
    (``x @ x`` reads ``x`` by ``(i, k)`` and by ``(k, j)``: two reads, each staged alone)."""
    dims = _dims(info, operand)
    if dims is None:
        return [operand]
    src = info.operand_sources[operand]
    return [k for k in range(info.num_inputs)
            if k == operand or (info.operand_sources[k] == src and _dims(info, k) == dims)]


def read_halo(info, operand: int) -> List[int]:
    """For each dim of input ``operand``, how far the union of the reads of its buffer
    (:func:`buffer_reads`) extends beyond one read's tile: ``max c - min c`` over the reads
    ``d + c`` (0 when it is read once)."""
    reads = buffer_reads(info, operand)
    if len(reads) == 1:
        return [0] * len(info.operand_offsets[operand]) if info.operand_offsets else []
    return [max(c) - min(c) for c in zip(*([c for _, c in info.operand_offsets[k]] for k in reads))]
