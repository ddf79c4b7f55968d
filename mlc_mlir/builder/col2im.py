"""``col2im``: sum sliding blocks (columns) back into an image, the adjoint of ``im2col``
(PyTorch ``fold`` / ``aten.col2im``, ONNX ``Col2Im``), any number of spatial dims.

Column ``l`` of ``x[n, c * K + k, :]`` (``K`` the block size, ``k`` a position in the block)
lands at image position ``h = b * s - p + k * d`` per spatial dim, ``b`` the block's
coordinate in the block grid. So each image position receives, per block position ``k``, at
most one column: the one with ``b = (h + p - k * d) / s`` when that divides and lies in the
grid. The shapes are static, so that ``b`` (or -1) is a small constant table per spatial dim
``(S_i, K_i)``, and the op is one ``linalg.generic`` over ``(N, C, S..., K...)`` (the block
positions are reductions) that reads the tables through maps and ``x`` with
``tensor.extract``: the work is ``N C prod(S) prod(K)``, no scatter.

Source: PyTorch ``aten/src/ATen/native/im2col.h`` (``col2im``), ``torch.nn.Fold``; ONNX
``Col2Im`` (opset 18); Chellapilla et al. (2006) for im2col convolution.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import linalg_emit as emit
from .tensor import Tensor


def _per_dim(op: str, arg: str, v, d: int, lo: int) -> list:
    t = [int(v)] * d if isinstance(v, (int, np.integer)) else [int(e) for e in v]
    if len(t) == 1:
        t = t * d
    if len(t) != d or min(t) < lo:
        raise BuildError(f"{op}: argument '{arg}' is {v!r}; expected an int or {d} ints, each >= {lo}")
    return t


def _sources(size: int, k: int, stride: int, pad: int, dil: int, blocks: int) -> np.ndarray:
    """``(size, k)`` int32: the block coordinate whose position ``k`` lands at image ``h``, or -1."""
    t = np.arange(size)[:, None] + pad - np.arange(k)[None, :] * dil
    b = t // stride
    ok = (t % stride == 0) & (b >= 0) & (b < blocks)
    return np.where(ok, b, -1).astype(np.int32)


def col2im(x, image_shape: Sequence[int], block_shape: Sequence[int], strides=1, pads=0, dilations=1,
           name: Optional[str] = None) -> Tensor:
    """Sum the columns of ``x`` into an image of ``image_shape`` (see the module docstring)::

        out[n, c, h...] = sum over k... of x[n, c * K + flat(k), flat(b)]  with b = (h + p - k d) / s

    Parameters
    ----------
    x : Tensor or numpy.ndarray, shape (N, C * prod(block_shape), L), any dtype
        ``L = prod(B_i)``, ``B_i = (S_i + p_begin_i + p_end_i - d_i (k_i - 1) - 1) // s_i + 1``.
    image_shape : sequence of int
        ``(S_1, .., S_D)``, D >= 1, each >= 1.
    block_shape : sequence of int
        ``(k_1, .., k_D)``, each >= 1.
    strides, dilations : int or D ints, >= 1
    pads : int, D ints (symmetric) or 2 D ints (begins then ends, ONNX order), >= 0

    Returns
    -------
    Tensor (N, C, S_1, .., S_D), x's dtype.

    Raises
    ------
    BuildError
        For x not of rank 3, a dim 1 not divisible by ``prod(block_shape)``, an ``L`` that is
        not the number of blocks (``col2im: argument 'x' has shape (1, 4, 10); expected
        (N, C * 4, 9): 3 x 3 blocks of 2 x 2 in (4, 4) with strides [1, 1], ...``), a block
        larger than the padded image, or a bad window argument.
    """
    op = "col2im"
    fn = emit.function_of(op, x)
    x = emit.tensor_arg(op, "x", x)
    size = [int(s) for s in image_shape]
    d = len(size)
    if d < 1 or min(size) < 1:
        raise BuildError(f"{op}: argument 'image_shape' is {list(image_shape)}; expected >= 1 sizes, each >= 1")
    k = _per_dim(op, "block_shape", block_shape, d, 1)
    s, dil = _per_dim(op, "strides", strides, d, 1), _per_dim(op, "dilations", dilations, d, 1)
    p = [int(pads)] * d if isinstance(pads, (int, np.integer)) else [int(e) for e in pads]
    p = p * 2 if len(p) == d else p
    if len(p) != 2 * d or min(p) < 0:
        raise BuildError(f"{op}: argument 'pads' is {pads!r}; expected an int, {d} ints or {2 * d} ints "
                         "(begins, then ends), each >= 0")
    span = [dil[i] * (k[i] - 1) + 1 for i in range(d)]
    if any(span[i] > size[i] + p[i] + p[d + i] for i in range(d)):
        raise BuildError(f"{op}: blocks {k} with dilations {dil} span {span}; expected at most the padded "
                         f"image {[size[i] + p[i] + p[d + i] for i in range(d)]}")
    blocks = [(size[i] + p[i] + p[d + i] - span[i]) // s[i] + 1 for i in range(d)]
    kk, ll = int(np.prod(k)), int(np.prod(blocks))
    if x.ndim != 3 or not isinstance(x.shape[1], int) or x.shape[1] % kk or x.shape[2] != ll:
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected (N, C * {kk}, {ll}): "
                         f"{' x '.join(map(str, blocks))} blocks of {' x '.join(map(str, k))} in "
                         f"{tuple(size)} with strides {s}, pads {p}, dilations {dil}")
    c = x.shape[1] // kk
    out_shape = (x.shape[0], c) + tuple(size)
    nm = emit.op_name(fn, op, name)
    tables = [emit.constant_op(_sources(size[i], k[i], s[i], p[i], dil[i], blocks[i]), name=f"{nm}.src{i}")
              for i in range(d)]
    rank = 2 + 2 * d
    maps = [ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(2 + i), ir.AffineDimExpr.get(2 + d + i)])
            for i in range(d)]
    is_float = dtypes.is_float(x.dtype)
    idx = ir.IndexType.get()

    def flat(vals, dims):
        """Row-major ``index`` of ``vals`` (``index`` values) in a grid of ``dims``."""
        out = vals[0]
        for v, n in zip(vals[1:], dims[1:]):
            out = arith_d.addi(arith_d.muli(out, arith_d.ConstantOp(idx, n).result), v)
        return out

    def body(*args):
        srcs, acc = args[:d], args[d]
        zero = emit.scalar(0, "int32")
        inside = arith_d.cmpi(arith_d.CmpIPredicate.sge, srcs[0], zero)
        for v in srcs[1:]:
            inside = arith_d.andi(inside, arith_d.cmpi(arith_d.CmpIPredicate.sge, v, zero))
        b = [arith_d.index_cast(idx, arith_d.maxsi(v, zero)) for v in srcs]
        kpos = [linalg_d.IndexOp(2 + d + i).result for i in range(d)]
        chan = arith_d.addi(arith_d.muli(linalg_d.IndexOp(1).result, arith_d.ConstantOp(idx, kk).result),
                            flat(kpos, k))
        v = tensor_d.ExtractOp(x.value, [linalg_d.IndexOp(0).result, chan, flat(b, blocks)]).result
        v = arith_d.select(inside, v, emit.scalar(0, x.dtype))
        return [arith_d.addf(acc, v) if is_float else arith_d.addi(acc, v)]

    res = emit.generic(nm, [t.value for t in tables], maps, [emit.filled(out_shape, x.dtype, 0, f"{nm}.init")],
                       [ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(j) for j in range(2 + d)])],
                       ["parallel"] * (2 + d) + ["reduction"] * d, body)
    return Tensor(res[0], fn)
