"""``ConvToWinograd`` (``mlc-conv-to-winograd``): rewrite chosen stride-1 3x3
``linalg.conv_2d_nhwc_hwcf`` ops into Winograd's minimal filtering algorithm F(m x m, 3 x 3):
a filter transform, an input transform, one ``linalg.batch_matmul`` over the ``(m + 2)^2``
transformed points and an output transform.

For each ``m x m`` output tile ``Y`` of one channel pair, with ``d`` the ``(m+2) x (m+2)`` input
tile and ``g`` the 3 x 3 filter (Lavin & Gray, "Fast Algorithms for Convolutional Neural
Networks", CVPR 2016, eq. 8)::

    Y = A^T [ (G g G^T) . (B^T d B) ] A

Summed over the input channels, the elementwise product of each of the ``alpha^2`` points
(``alpha = m + 2``) becomes a GEMM over the channels. For F(4x4, 3x3) of a ``(1, 58, 58, C)``
padded input (``tH = tW = 14`` tiles, ``T = N * tH * tW = 196``) the rewrite emits::

    %u = arith.constant {mlc.name = "conv2d.winograd_filter.folded"} : tensor<36xCxF>
                                                       // G g G^T per (c, f), float64 numpy
    %r_i = tensor.extract_slice %x[0, i, 0, 0] [1, 14, 58, C] [1, 4, 1, 1]   // i = 0..5
    %t = linalg.generic {mlc.name = "conv2d.winograd_input_rows"}   // t[a,n,th,w,c] =
           ins(%r_0..%r_5, B^T columns) -> tensor<6x1x14x58xC>    //   sum_i BT[a,i] r_i[n,th,w,c]
    %c_j = tensor.extract_slice %t[0, 0, 0, j, 0] [6, 1, 14, 14, C] [1, 1, 1, 4, 1]
    %v = linalg.generic {mlc.name = "conv2d.winograd_input"}        // v[a,b,n,th,tw,c] =
           ins(%c_0..%c_5, B^T columns) -> tensor<6x6x1x14x14xC>  //   sum_j BT[b,j] c_j[a,...]
    %mm = linalg.batch_matmul {mlc.name = "conv2d"}
           ins(collapse(%v) : 36x196xC, %u : 36xCxF) outs(36x196xF)
    %o = linalg.generic {mlc.name = "conv2d.winograd_output_rows"}  // o[p,b,...] = sum_a AT[p,a] M[a,b,...]
    %y = linalg.generic {mlc.name = "conv2d.winograd_output"}       // y[n,th,p,tw,q,f] =
           -> tensor<1x14x4x14x4xF>                                //   sum_b AT[q,b] o[p,b,...] (+ epilogue)
    %y4 = tensor.collapse_shape %y [[0], [1, 2], [3, 4], [5]] : tensor<1x56x56xF>

Each step is one elementwise generic over its output with a single result: the coefficient
columns are constant ``(alpha,)`` tensors read through the point dim, the data through
strided slices and projected maps, so the elementwise rule vectorizes every step along the
channels (dense multiply-adds: 12 per transformed value, small next to the GEMM). The
elementwise chain after the convolution (bias, a residual add of the full output, relu) runs in
the last step; the ``(N, tH, m, tW, m, F)`` result is the NHWC output once collapsed, which
``prepare_passes.WriteReshapedIntoSlices`` writes straight into the next convolution's padded buffer.
An input smaller than ``m * tH + 2`` rows is zero-extended (its padded buffer made larger), an
output larger than ``OH`` is sliced. The transform of a constant filter is computed at compile
time (numpy, float64), that of a filter computed at run time is a contraction generic. The GEMM
has ``(alpha / m)^2 / 9`` of the direct convolution's multiply-adds: 4x fewer for F(4x4, 3x3),
2.25x for F(2x2, 3x3).

Numerics: the same sums in another order through the transforms' constants; the relative
error against a float64 convolution grows with ``m`` (measured in ``test_graph_winograd``).
Source: Lavin & Gray (2016); the matrices are theirs (F(2x2,3x3) and F(4x4,3x3) with the
points 0, +-1, +-2); TVM TOPI ``conv2d_winograd`` (the tile/transform/batched GEMM structure and
the pre-transformed weights); MLIR's ``linalg.winograd_*_transform`` ops and
``transform.structured.winograd_conv2d``, whose decomposition keeps channels outermost (one
2-D ``linalg.matmul`` by a 6x6 constant per channel and tile) rather than in the vector lanes,
hence this rewrite into vectorizable generics. (A first version computed each transform as one
generic with 36 inputs and 36 results, unrolled and sparse: One-Shot Bufferize copied its
results, slices of one buffer, in and out of every tile loop.)
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from ..._mlir import arith_d, ir, linalg_d, tensor_d
from ...errors import PipelineError
from ...ir import dtypes, emitters
from ...ir.constants import line_aligned
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.emit_rewrites import named_fill, replace_contraction, reshape
from ...graph.linalg_attrs import int_list, is_projected_map, static_slice, tensor_shape
from ...graph.use_def import clone_ops, named_ops, producer
from .conv_select import chosen_algorithm, conv_signature, conv_window
from ...graph.pass_manager import ScopedPass, register_pass

#: ``select(x_shape, w_shape, out_shape, dtype) -> m``: the output tile (2 or 4) for an NHWC
#: convolution, or 0 to leave it alone.
WinogradSelect = Callable[[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str], int]

#: ``m -> (B^T, G, A^T)`` of F(m x m, 3 x 3) (Lavin & Gray 2016; points 0, 1, -1 [, 2, -2], inf).
WINOGRAD_MATRICES = {
    2: (np.array([[1, 0, -1, 0],
                  [0, 1, 1, 0],
                  [0, -1, 1, 0],
                  [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0],
                  [1 / 2, 1 / 2, 1 / 2],
                  [1 / 2, -1 / 2, 1 / 2],
                  [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0],
                  [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0],
                  [0, -4, -4, 1, 1, 0],
                  [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0],
                  [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0],
                  [-1 / 6, -1 / 6, -1 / 6],
                  [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6],
                  [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0],
                  [0, 1, -1, 2, -2, 0],
                  [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], np.float64)),
}


def winograd_applies(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int],
                     strides: Sequence[int], dilations: Sequence[int]) -> bool:
    """Whether an NHWC/HWCF convolution (input ``(N, H, W, C)``, filter ``(KH, KW, C, F)``,
    output ``(N, OH, OW, F)``) has the form F(m x m, 3 x 3) computes: a 3x3 window, stride 1,
    dilation 1, the input exactly ``OH + 2`` by ``OW + 2`` (padding already applied)."""
    return tuple(w_shape[:2]) == (3, 3) and list(strides) == [1, 1] and list(dilations) == [1, 1] \
        and x_shape[1] == out_shape[1] + 2 and x_shape[2] == out_shape[2] + 2


def _combine(name: str, coeffs: np.ndarray, inputs, in_map: ir.AffineMap, point_dim: int,
             out_shape: Sequence[int], dtype: str, extra=(), extra_maps=(), epilogue=None):
    """One step of a separable transform: ``out[..., p, ...] = sum_k coeffs[p, k] * inputs[k][...]``
    over the ``k`` with ``coeffs[p, k] != 0`` (a zero coefficient's input is not read: a NaN or
    infinity there does not reach ``out[..., p, ...]``)
    as a ``linalg.generic`` over ``out_shape`` (identity output map) named ``name``. Input ``k``
    is read through ``in_map``; coefficient column ``k`` is a constant ``(P,)`` tensor read
    through iteration dim ``point_dim``, so every op of the body is a broadcast multiply-add
    that vectorizes along the innermost (channel) dim. ``extra`` inputs (maps ``extra_maps``) go
    to ``epilogue(value, extra_args)``, which returns the value to store."""
    rank = len(out_shape)
    cols = [_constant(np.ascontiguousarray(coeffs[:, k]), dtype) for k in range(coeffs.shape[1])]
    col_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(point_dim)])
    k = len(inputs)

    def body(*args):
        xs, cs, ext = args[:k], args[k:2 * k], args[2 * k:2 * k + len(extra)]
        zero = arith_d.constant(xs[0].type, 0.0)
        acc = zero
        for x, c in zip(xs, cs):
            # a zero coefficient skips its input exactly (0 * NaN and 0 * inf are NaN): an
            # output of F(2x2, 3x3) then reads only its window's pixels
            term = arith_d.addf(acc, arith_d.mulf(c, x)) if acc is not zero else arith_d.mulf(c, x)
            acc = arith_d.select(arith_d.cmpf(arith_d.CmpFPredicate.OEQ, c, zero), acc, term)
        return [epilogue(acc, ext) if epilogue is not None else acc]

    init = emitters.empty(list(out_shape), dtype, name)
    (r,) = emitters.generic(name, list(inputs) + cols + list(extra),
                            [in_map] * k + [col_map] * k + list(extra_maps), [init],
                            [ir.AffineMap.get_identity(rank)], ["parallel"] * rank, body)
    return r


def _slice(v, offsets, sizes, strides, result_shape):
    """``tensor.extract_slice`` of static offsets/sizes/strides, rank-reduced to ``result_shape``."""
    t = ir.RankedTensorType.get(list(result_shape), ir.RankedTensorType(v.type).element_type)
    return tensor_d.ExtractSliceOp(t, v, [], [], [], offsets, sizes, strides).result


def _constant(array: np.ndarray, dtype: str):
    t = ir.RankedTensorType.get(list(array.shape), dtypes.to_ir_type(dtype))
    return arith_d.ConstantOp(t, ir.DenseElementsAttr.get(
        np.ascontiguousarray(array, dtypes.to_numpy_dtype(dtype)), type=t)).result


def _filter_transform(mod: Module, w, g: np.ndarray, dtype: str, nm: str):
    """``U[a, b, c, f] = sum_ij G[a, i] G[b, j] w[i, j, c, f]`` collapsed to ``(alpha^2, C, F)``:
    computed in float64 with numpy when ``w`` is a constant whose bytes are known (a folded
    filter: ``mlc.compile`` folds the filter transposes first), else a contraction generic run
    with the model."""
    kh, kw, c, f = tensor_shape(w)
    alpha = g.shape[0]
    owner = w.owner
    value = None
    if not isinstance(owner, ir.Block) and owner.name == "arith.constant":
        value = mod.constant_value(owner.attributes["value"])
    if value is not None:
        u = np.einsum("ai,bj,ijcf->abcf", g, g, np.asarray(value, np.float64))
        u = np.ascontiguousarray(u.reshape(alpha * alpha, c, f), dtypes.to_numpy_dtype(dtype))
        attr = mod._keepalive.constant(line_aligned(u), f"{nm}_winograd_filter")
        cst = arith_d.ConstantOp(ir.RankedTensorType.get([alpha * alpha, c, f], dtypes.to_ir_type(dtype)), attr)
        cst.operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(f"{nm}.winograd_filter.folded")
        return cst.result
    gm = _constant(g, dtype)
    d = [ir.AffineDimExpr.get(i) for i in range(6)]          # a, b, c, f, i, j
    maps = [ir.AffineMap.get(6, 0, [d[0], d[4]]), ir.AffineMap.get(6, 0, [d[1], d[5]]),
            ir.AffineMap.get(6, 0, [d[4], d[5], d[2], d[3]])]
    init = emitters.filled([alpha, alpha, c, f], dtype, 0.0, f"{nm}.winograd_filter.init")
    (u,) = emitters.generic(f"{nm}.winograd_filter", [gm, gm, w], maps, [init],
                            [ir.AffineMap.get(6, 0, d[:4])], ["parallel"] * 4 + ["reduction"] * 2,
                            lambda ga, gb, wv, acc: [arith_d.addf(acc, arith_d.mulf(arith_d.mulf(ga, gb), wv))])
    return reshape(u, [[0, 1], [2], [3]], (alpha * alpha, c, f), f"{nm}.winograd_filter_3d")


def _extended_input(x, rows: int, cols: int, dtype: str, nm: str):
    """``(x zero-extended at the bottom/right to rows x cols, ops to erase once unused)``: ``x``
    itself when it has that size; when ``x`` is an insert into a filled buffer (a zero-padded
    input), the same insert into a larger buffer filled alike (no copy of ``x``); else ``x``
    inserted into a new zero-filled buffer."""
    n, h, w, c = tensor_shape(x)
    if (h, w) == (rows, cols):
        return x, []
    ins = producer(x)
    fill = producer(ins.operands[1]) if ins is not None and ins.name == "tensor.insert_slice" \
        and len(ins.operands) == 2 and len(list(x.uses)) == 1 else None
    if fill is not None and fill.name == "linalg.fill" and len(list(fill.results[0].uses)) == 1:
        big = linalg_d.fill(fill.operands[0], outs=[emitters.empty([n, rows, cols, c], dtype, nm)])
        emitters.set_name(big.owner, f"{nm}.winograd_pad")
        offsets, sizes, strides = static_slice(ins)
        src = ins.operands[0]
        return tensor_d.InsertSliceOp(src, big, [], [], [], offsets, sizes, strides).result, [ins, fill]
    full = emitters.filled([n, rows, cols, c], dtype, 0.0, f"{nm}.winograd_pad")
    return tensor_d.InsertSliceOp(x, full, [], [], [], [0, 0, 0, 0], [n, h, w, c], [1, 1, 1, 1]).result, []


def _epilogue_link(value, shape) -> Optional[ir.Operation]:
    """The single user of ``value`` when the output transform can compute it per output element:
    a named all-parallel ``linalg.generic`` of one result of ``shape`` (N, OH, OW, F) reading
    ``value`` with the identity map, its init unused by the body, no ``linalg.index``, every
    other input read through dims and zeros (a bias; a residual of the full shape through the
    identity map). None otherwise."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    u = uses[0].owner
    u = getattr(u, "operation", u)
    if u.name != "linalg.generic" or OP_NAME_ATTR not in u.attributes or len(u.results) != 1 \
            or u.block != value.owner.operation.block or tensor_shape(u.results[0]) != tuple(shape):
        return None
    if any("parallel" not in str(a) for a in ir.ArrayAttr(u.attributes["iterator_types"])):
        return None
    body = u.regions[0].blocks[0]
    if len(list(body.arguments[-1].uses)) or any(o.operation.name == "linalg.index" for o in body.operations):
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(u.attributes["indexing_maps"])]
    ident = ir.AffineMap.get_identity(4)
    n_in = len(u.operands) - 1
    if maps[n_in] != ident:
        return None
    for v, mp in zip(list(u.operands)[:n_in], maps[:n_in]):
        if v == value or (mp == ident and tensor_shape(v) == tuple(shape)):
            continue
        used = {e.position for e in mp.results if isinstance(e, ir.AffineDimExpr)}
        if not is_projected_map(mp) or used & {1, 2}:
            return None
    return u


def _squeezed(v, mp: ir.AffineMap):
    """A broadcast input ``v`` read through ``mp`` (dims of ``(n, h, w, f)`` and zeros) as
    ``(value, map over (n, th, tw, f))`` with its unit dims read through zeros collapsed away,
    so a ``(F, 1, 1)`` bias is a contiguous ``(F)`` vector (a transposing read of it
    vectorizes as one extract/insert per lane)."""
    keep = [k for k, e in enumerate(mp.results) if isinstance(e, ir.AffineDimExpr)]
    shape = tensor_shape(v)
    if len(keep) == len(shape):
        return v, mp
    groups, cur = [], []
    for k in range(len(shape)):
        cur.append(k)
        if k in keep:
            groups.append(cur)
            cur = []
    if cur:
        if groups:
            groups[-1].extend(cur)
    dtype = dtypes.from_ir_type(ir.RankedTensorType(v.type).element_type)
    t = ir.RankedTensorType.get([shape[k] for k in keep], dtypes.to_ir_type(dtype))
    r = tensor_d.CollapseShapeOp(t, v, groups).result
    return r, ir.AffineMap.get(4, 0, [mp.results[k] for k in keep])


def _maps(rank: int, *dims) -> ir.AffineMap:
    return ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in dims])


def _rewrite(mod: Module, op: ir.Operation, m: int) -> None:
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, _, _, c = tensor_shape(x)
    _, oh, ow, f = tensor_shape(init)
    *_, dtype, nm = conv_window(op)
    bt, g, at = WINOGRAD_MATRICES[m]
    alpha = m + 2
    th, tw = -(-oh // m), -(-ow // m)
    tiles = n * th * tw
    fill = named_fill(init)
    start = fill.operands[0] if fill is not None and not _is_zero(fill.operands[0]) else None
    with ir.InsertionPoint(op):
        u = _filter_transform(mod, w, g, dtype, nm)
        xe, dead = _extended_input(x, m * th + 2, m * tw + 2, dtype, nm)
        wx = m * tw + 2
        # B^T d: rows i of the tiles (stride m), t1[a, n, th, w, c]
        rows = [_slice(xe, [0, i, 0, 0], [n, th, wx, c], [1, m, 1, 1], [n, th, wx, c]) for i in range(alpha)]
        t1 = _combine(f"{nm}.winograd_input_rows", bt, rows, _maps(5, 1, 2, 3, 4), 0, [alpha, n, th, wx, c], dtype)
        # (B^T d) B: columns j of the tiles, v[a, b, n, th, tw, c]
        cols = [_slice(t1, [0, 0, 0, j, 0], [alpha, n, th, tw, c], [1, 1, 1, m, 1], [alpha, n, th, tw, c])
                for j in range(alpha)]
        v = _combine(f"{nm}.winograd_input", bt, cols, _maps(6, 0, 2, 3, 4, 5), 1,
                     [alpha, alpha, n, th, tw, c], dtype)
        v3 = reshape(v, [[0, 1], [2, 3, 4], [5]], (alpha * alpha, tiles, c), f"{nm}.winograd_input_3d")
        acc = emitters.filled([alpha * alpha, tiles, f], dtype, 0.0, f"{nm}.init")
        mm = linalg_d.batch_matmul(v3, u, outs=[acc])
        emitters.set_name(mm.owner, nm)
        m6 = reshape(mm, [[0, 1], [2, 3, 4], [5]], (alpha, alpha, n, th, tw, f), f"{nm}.winograd_gemm_6d")
        # A^T M: r[p, b, n, th, tw, f]
        ms = [_slice(m6, [a, 0, 0, 0, 0, 0], [1, alpha, n, th, tw, f], [1] * 6, [alpha, n, th, tw, f])
              for a in range(alpha)]
        r = _combine(f"{nm}.winograd_output_rows", at, ms, _maps(6, 1, 2, 3, 4, 5), 0,
                     [m, alpha, n, th, tw, f], dtype)
    # the elementwise chain after the convolution (bias, residual add, relu) runs in the last
    # step of the output transform, per output element, where the chain ends (its inputs
    # dominate there)
    chain, last = [], op
    while True:
        link = _epilogue_link(last.results[0], (n, oh, ow, f))
        if link is None or (m * th, m * tw) != (oh, ow) and any(
                tensor_shape(v) == (n, oh, ow, f) and v != last.results[0] for v in list(link.operands)[:-1]):
            break
        chain.append(link)
        last = link
    y6_shape = [n, th, m, tw, m, f]
    with ir.InsertionPoint(last):
        extra, extra_maps, roles = [], [], []
        for link in chain:
            maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(link.attributes["indexing_maps"])]
            for val, mp in zip(list(link.operands)[:-1], maps):
                if val in [k.results[0] for k in chain] or val == op.results[0]:
                    roles.append(None)
                    continue
                roles.append(len(extra))
                if tensor_shape(val) == (n, oh, ow, f) and mp == ir.AffineMap.get_identity(4):
                    extra.append(reshape(val, [[0], [1, 2], [3, 4], [5]], y6_shape, f"{nm}.winograd_residual"))
                    extra_maps.append(ir.AffineMap.get_identity(6))
                else:
                    sv, smp = _squeezed(val, mp)
                    extra.append(sv)
                    # (n, h, w, f) -> (n, th, p, tw, q, f): n and f keep their meaning
                    extra_maps.append(ir.AffineMap.get(6, 0, [ir.AffineDimExpr.get({0: 0, 3: 5}[e.position])
                                                              for e in smp.results]))

        def epilogue(value, ext):
            if start is not None:
                value = arith_d.addf(value, start)
            return _apply_chain(chain, roles, value, ext)

        rs = [_slice(r, [0, b, 0, 0, 0, 0], [m, 1, n, th, tw, f], [1] * 6, [m, n, th, tw, f]) for b in range(alpha)]
        # (A^T M) A: y[n, th, p, tw, q, f], i.e. (N, OH, OW, F) once collapsed
        y6 = _combine(f"{nm}.winograd_output", at, rs, _maps(6, 2, 0, 1, 3, 5), 4, y6_shape, dtype,
                      extra, extra_maps, epilogue)
        y = reshape(y6, [[0], [1, 2], [3, 4], [5]], (n, m * th, m * tw, f), f"{nm}.winograd_output_4d")
        if (m * th, m * tw) != (oh, ow):
            y = _slice(y, [0, 0, 0, 0], [n, oh, ow, f], [1] * 4, [n, oh, ow, f])
    if chain:
        chain[-1].results[0].replace_all_uses_with(y)
        for link in reversed(chain):
            link.erase()
    replace_contraction(op, y)
    for d in dead:          # the old padded input: insert, then its fill
        if not any(True for r in d.results for _ in r.uses):
            d.erase()


def _apply_chain(chain, roles, value, ext):
    """``value`` through the bodies of the epilogue ``chain`` (cloned at the insertion point):
    an input whose role is None is the running value, the others their block argument in
    ``ext`` (position ``role``)."""
    r = 0
    for link in chain:
        body = link.regions[0].blocks[0]
        mapping = {}
        for a in list(body.arguments)[:-1]:
            mapping[a] = value if roles[r] is None else ext[roles[r]]
            r += 1
        ops = list(body.operations)
        clone_ops(ops[:-1], mapping)
        y = ops[-1].operands[0]
        value = mapping.get(y, y)
    return value


def _is_zero(v) -> bool:
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return False
    try:
        return ir.FloatAttr(owner.attributes["value"]).value == 0.0
    except ValueError:
        return False


@register_pass
class ConvToWinograd(ScopedPass):
    """Rewrite stride-1 3x3 ``linalg.conv_2d_nhwc_hwcf`` ops whose output starts from a named
    ``linalg.fill`` into Winograd F(m x m, 3 x 3) (see the module docstring). Float dtypes only.

    Parameters
    ----------
    select : callable, optional
        ``select(x_shape, w_shape, out_shape, dtype) -> m`` with the (padded) input
        ``(N, H, W, C)``, filter ``(3, 3, C, F)`` and output ``(N, OH, OW, F)`` shapes and the
        element dtype: the output tile ``m`` (2 or 4), or 0 to keep the convolution. Default:
        ``m = 4`` for every convolution of that form. The default schedule passes
        :func:`mlc_mlir.schedule.rules.conv_strategy.winograd_tile` for its target. A convolution with
        an ``mlc.conv_algorithm`` attribute (a tuned choice) takes its tile from it (2 or 4;
        any other value keeps the convolution), whatever ``select`` says.
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.

    Raises
    ------
    PipelineError
        If ``select`` returns a tile other than 0, 2 or 4.
    """

    name = "mlc-conv-to-winograd"
    select: Optional[WinogradSelect]

    def transform(self, mod: Module) -> Module:
        for op in named_ops(mod, "linalg.conv_2d_nhwc_hwcf", self.functions):
            *shapes, dtype = conv_signature(op)
            if not dtypes.is_float(dtype) or named_fill(op.operands[2]) is None or not winograd_applies(
                    *shapes, int_list(op.attributes["strides"]), int_list(op.attributes["dilations"])):
                continue
            m = chosen_algorithm(op)
            if m is None:
                m = 4 if self.select is None else self.select(*shapes, dtype)
            elif m not in (2, 4):
                m = 0
            if m not in (0, 2, 4):
                raise PipelineError(f"mlc-conv-to-winograd: select returned m={m!r} for "
                                    f"{ir.StringAttr(op.attributes[OP_NAME_ATTR]).value}; expected 0, 2 or 4")
            if m:
                _rewrite(mod, op, m)
        return mod
