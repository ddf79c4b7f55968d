"""``PackMatmulWeights`` (``mlc-pack-matmul-weights``): give the constant B of a
``linalg.matmul`` the layout its register tile reads, once at compile time, and compute the
product as a ``linalg.mmt4d``.

Before (``C (M, N) = A (M, K) @ W (K, N)``, ``W`` a constant, ``NR = 16``)::

    %c = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e : tensor<49x512xf32>)
    %y = linalg.matmul {mlc.name = "conv2d"} ins(%a, %w : tensor<49x4608xf32>, tensor<4608x512xf32>)
           outs(%c)

After (the transpose of the constant is folded by ``graph.FoldConstant``)::

    %a4 = tensor.expand_shape %a [[0], [1, 2, 3]] : tensor<49x4608x1x1xf32>        // .lhs_4d
    %w3 = tensor.expand_shape %w [[0], [1, 2]] : tensor<4608x32x16xf32>
    %wt = linalg.transpose ins(%w3) permutation = [1, 0, 2] : tensor<32x4608x16xf32>  // .w_packed
    %w4 = tensor.expand_shape %wt [[0], [1], [2, 3]] : tensor<32x4608x16x1xf32>
    %c4 = linalg.fill {mlc.name = "conv2d.init"} ... : tensor<49x32x1x16xf32>
    %r = linalg.mmt4d {mlc.name = "conv2d"} ins(%a4, %w4) outs(%c4)
    %y = tensor.collapse_shape %r [[0], [1, 2, 3]] : tensor<49x512xf32>              // .2d

``C[m, n1 * NR + n0] += A[m, k] * Wp[n1, k, n0]``: each ``K x NR`` micro-panel of B is contiguous
(``NR`` = the register tile's width: two vectors of the target), so the register tile streams it
without the per-call packing copy (``cache_read``) the Goto recipe does for a ``(K, N)`` B, and
without reading rows ``4 N`` bytes apart in place (a 512-column B puts its rows into 2 of the
L1d's 64 sets). Only matmuls whose result feeds no elementwise op are rewritten: their epilogue
would otherwise be fused into the matmul's tiles, which the reshape in between prevents (the
im2col GEMMs of :class:`~.conv_im2col.ConvToIm2col` feed an ``expand_shape``). Measured on a 2-core AVX2 EPYC
(znver1), ResNet-18's 49 x 4608 x 512 layer-4 GEMM: 7.05 ms (B read in place) -> 5.7 ms on one
thread, 4.15 -> 3.5 ms on two.

Source: IREE's CPU data tiling (``SetEncoding`` / ``MaterializeEncoding``: constant weights
packed at compile time, ``linalg.mmt4d`` with ``M0 = 1`` for narrow matmuls); BLIS's packed
micro-panels (Van Zee & van de Geijn, TOMS 2015); oneDNN's and TVM ``dense_pack``'s pre-packed
weights.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..._mlir import ir, linalg_d
from ...ir import dtypes, emitters
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.constant_eval import NUMPY_OPS
from ...graph.emit_rewrites import emit_transpose, replace_contraction, reshape, reshaped_accumulator
from ...graph.linalg_attrs import indexing_maps, matmul_maps, tensor_shape
from ...graph.use_def import named_ops, producer
from ...graph.op_kinds import BROADCAST, ELEMWISE, op_kind
from ...graph.pass_manager import ScopedPass, register_pass

#: ``select(m, n, k, dtype) -> NR``: the packed panel width for a matmul of that shape, or 0 to
#: leave it as it is.
PackSelect = Callable[[int, int, int, str], int]


def is_constant_subgraph(value) -> bool:
    """Whether ``value`` is computed from tensor constants by data-movement ops only (the ops
    ``graph.FoldConstant`` evaluates with numpy: a transposed and collapsed filter)."""
    op = producer(value)
    if op is None or op.name not in NUMPY_OPS or op.name == "linalg.fill":
        return False
    if op.name == "arith.constant":
        return isinstance(op.results[0].type, ir.RankedTensorType)
    return all(is_constant_subgraph(v) for v in op.operands
               if isinstance(v.type, ir.RankedTensorType))


def _feeds_elementwise(op: ir.Operation) -> bool:
    return any(op_kind(u.owner) in (ELEMWISE, BROADCAST) for u in op.results[0].uses)


def _rewrite(op: ir.Operation, nr: int) -> None:
    a, w, init = op.operands[0], op.operands[1], op.operands[2]
    m, k = tensor_shape(a)
    n = tensor_shape(w)[1]
    n1 = n // nr
    nm = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
    with ir.InsertionPoint(op):
        a4 = reshape(a, [[0], [1, 2, 3]], (m, k, 1, 1), f"{nm}.lhs_4d")
        w3 = reshape(w, [[0], [1, 2]], (k, n1, nr), f"{nm}.w_panels")
        wt = emit_transpose(w3, [1, 0, 2], f"{nm}.w_packed")
        w4 = reshape(wt, [[0], [1], [2, 3]], (n1, k, nr, 1), f"{nm}.w_packed_4d")
        acc = reshaped_accumulator(init, [[0], [1, 2, 3]], (m, n1, 1, nr), nm)
        r = linalg_d.mmt4d(a4, w4, outs=[acc])
        emitters.set_name(r.owner, nm)
        y = reshape(r, [[0], [1, 2, 3]], (m, n1 * nr), f"{nm}.2d")
    replace_contraction(op, y)


@register_pass
class PackMatmulWeights(ScopedPass):
    """Rewrite ``linalg.matmul`` ops whose B is a constant (after data movement) and whose result
    feeds no elementwise op into ``linalg.mmt4d`` on a packed B (see the module docstring).
    Numerically the same sums in the same order of k.

    Parameters
    ----------
    select : callable
        ``select(m, n, k, dtype) -> NR`` (``dtype`` the element dtype name): the panel width, a
        divisor of ``N``, or 0 to keep the matmul. The default schedule passes
        :func:`mlc_mlir.schedule.cpu_recipes.packed_b_panel` for its target.
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    """

    name = "mlc-pack-matmul-weights"

    def __init__(self, select: PackSelect, functions: Optional[Sequence[str]] = None):
        super().__init__(select, functions)

    def transform(self, mod: Module) -> Module:
        for op in named_ops(mod, "linalg.matmul", self.functions):
            maps = indexing_maps(op)
            if maps is not None and maps != matmul_maps(op.context):
                continue  # a transposed operand (dense): its B is read along K already
            if not is_constant_subgraph(op.operands[1]) or _feeds_elementwise(op):
                continue
            if not ir.RankedTensorType(op.operands[0].type).has_static_shape:
                continue  # a dynamic M: the mmt4d rules need static extents

            (m, k), n = tensor_shape(op.operands[0]), tensor_shape(op.operands[1])[1]
            dtype = dtypes.from_ir_type(ir.RankedTensorType(op.operands[0].type).element_type)
            nr = self.select(m, n, k, dtype)
            if nr > 0 and n % nr == 0:
                _rewrite(op, nr)
        return mod
