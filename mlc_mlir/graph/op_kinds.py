"""Op pattern kinds (TVM ``OpPatternKind``) for the ops of graph functions.

``elementwise``: a ``linalg.generic`` whose operands all use the identity map (and
``linalg.fill``); ``broadcast``: parallel generic whose inputs use projected/constant maps
(``linalg.broadcast``); ``injective``: data movement (``linalg.transpose``, ``tensor.pad``,
slices, reshapes); ``reduction``: a generic with reduction iterators, ``linalg.reduce``;
``out_ewise_fusable``: matmul/conv/pooling (can absorb elementwise consumers); ``opaque``:
anything else (calls, ``mlc.call_library``, ``linalg.softmax``).
"""

from __future__ import annotations

from .._mlir import ir
from .linalg_attrs import indexing_maps, iterator_types

ELEMWISE, BROADCAST, INJECTIVE, REDUCTION, OUT_EWISE_FUSABLE, OPAQUE = (
    "elementwise", "broadcast", "injective", "reduction", "out_ewise_fusable", "opaque")

_INJECTIVE_OPS = {"linalg.transpose", "tensor.pad", "tensor.extract_slice", "tensor.insert_slice",
                  "tensor.collapse_shape", "tensor.expand_shape", "linalg.copy", "tensor.concat"}
_OUT_EWISE_PREFIXES = ("linalg.matmul", "linalg.batch_matmul", "linalg.conv_", "linalg.depthwise_conv",
                       "linalg.pooling_", "linalg.contract", "linalg.mmt4d")

#: ops that are free to duplicate into every group that uses them
FREE_OPS = {"arith.constant", "tensor.empty"}


def op_kind(op) -> str:
    """Pattern kind of an operation (TVM ``OpPatternKind``; see module docstring).

    Parameters
    ----------
    op : ir.Operation
        An op of a graph function.

    Returns
    -------
    str
        One of ``elementwise``, ``broadcast``, ``injective``, ``reduction``,
        ``out_ewise_fusable``, ``opaque``; read from the op name, the ``iterator_types`` and the
        ``indexing_maps`` attributes of a ``linalg.generic``.
    """
    name = op.name
    if name == "linalg.fill" or name == "linalg.elementwise":
        return ELEMWISE
    if name == "linalg.broadcast":
        return BROADCAST
    if name in _INJECTIVE_OPS:
        return INJECTIVE
    if name == "linalg.reduce":
        return REDUCTION
    if name.startswith(_OUT_EWISE_PREFIXES):
        return OUT_EWISE_FUSABLE
    if name == "linalg.generic":
        its = iterator_types(op)
        if "reduction" in its:
            return REDUCTION
        maps = indexing_maps(op)
        rank = len(its)
        if all(m == ir.AffineMap.get_identity(rank, context=op.context) for m in maps):
            return ELEMWISE
        if maps[-1] == ir.AffineMap.get_identity(rank, context=op.context) and all(m.is_projected_permutation for m in maps[:-1]) \
                or _is_broadcast_like(maps, rank, op):
            return BROADCAST
        return INJECTIVE
    return OPAQUE


def _is_broadcast_like(maps, rank, op) -> bool:
    """Inputs read with dims or constant 0 (numpy broadcasting), output identity."""
    if maps[-1] != ir.AffineMap.get_identity(rank, context=op.context):
        return False
    for m in maps[:-1]:
        for e in m.results:
            if not (isinstance(e, ir.AffineDimExpr) or isinstance(e, ir.AffineConstantExpr)):
                return False
    return True


def is_master(kind: str) -> bool:
    """True for the kinds of which a fused group holds at most one (the op a schedule tiles):
    ``reduction`` and ``out_ewise_fusable`` (TVM FuseOps' master op)."""
    return kind in (REDUCTION, OUT_EWISE_FUSABLE)
