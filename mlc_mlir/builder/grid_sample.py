"""``grid_sample``: sample an ``(N, C, *spatial)`` tensor at run-time coordinates (PyTorch
``grid_sample`` / ``aten.grid_sampler_2d`` / ``grid_sampler_3d``, ONNX ``GridSample``), any
number of spatial dims, nearest / linear / cubic interpolation, zeros / border / reflection
padding.

``grid[n, o..., :]`` holds the normalized coordinates (in ``[-1, 1]``, x first: component
``k`` addresses spatial dim ``D - 1 - k``) of output point ``out[n, :, o...]``. The op is one
``linalg.generic`` over the output that reads the ``D`` grid components through maps ending in
a constant, computes per spatial dim the source coordinate, its taps and their weights in
scalar ``arith``/``math`` ops, and reads ``x`` with ``tensor.extract`` at the taps (the
gathers of :mod:`.take`). Every tap index is clamped into the input before the read; a tap
outside it (``zeros`` padding, a NaN coordinate) contributes 0, so no coordinate reads outside
``x``.

Coordinates follow ATen's ``GridSampler.h``: unnormalize (``align_corners``: -1 and 1 are the
centres of the corner pixels, else their outer edges), then ``border`` clips into ``[0,
size-1]`` and ``reflection`` reflects about the borders (then clips); ``nearest`` rounds half
to even (``nearbyint``), ``linear`` weighs the ``2^D`` corners, ``cubic`` the ``4^D`` taps with
Keys' kernel (A = -0.75), padding applied to each tap's index rather than to the coordinate
(as onnxruntime does too; ONNX's reference implementation clamps the coordinate first, which
differs for cubic with ``border`` padding).

Source: PyTorch ``aten/src/ATen/native/GridSampler.h`` (``grid_sampler_unnormalize``,
``reflect_coordinates``, ``compute_coordinates``, ``get_cubic_upsample_coefficients``); ONNX
``GridSample`` (opsets 16, 20); Jaderberg et al., "Spatial Transformer Networks" (2015).
"""

from __future__ import annotations

import itertools
from typing import List, Optional, Tuple

from .._mlir import arith_d, ir, linalg_d, math_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import linalg_emit as emit
from .tensor import Tensor

MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
#: Keys' cubic convolution parameter as PyTorch and ONNX use it
CUBIC_A = -0.75


class _Axis:
    """Scalar coordinate arithmetic of one spatial axis of length ``size`` in the compute
    dtype ``ct`` (emitted at the current insertion point, inside the generic's body)."""

    def __init__(self, size: int, ct: str, padding_mode: str, align_corners: bool):
        self.size, self.ct, self.padding, self.align = size, ct, padding_mode, align_corners

    def c(self, v: float) -> ir.Value:
        return emit.scalar(v, self.ct)

    def unnormalize(self, g: ir.Value) -> ir.Value:
        """``((g + 1) / 2) * (size - 1)`` with ``align_corners``, else ``((g + 1) * size - 1) / 2``."""
        g1 = arith_d.addf(g, self.c(1.0))
        if self.align:
            return arith_d.mulf(arith_d.divf(g1, self.c(2.0)), self.c(self.size - 1))
        return arith_d.divf(arith_d.subf(arith_d.mulf(g1, self.c(self.size)), self.c(1.0)), self.c(2.0))

    def clip(self, v: ir.Value) -> ir.Value:
        return arith_d.minimumf(self.c(self.size - 1), arith_d.maximumf(v, self.c(0.0)))

    def reflect(self, v: ir.Value) -> ir.Value:
        """ATen ``reflect_coordinates`` about ``[lo, hi]`` (``[0, size-1]`` with
        ``align_corners``, else ``[-0.5, size-0.5]``)."""
        lo, hi = (0.0, self.size - 1.0) if self.align else (-0.5, self.size - 0.5)
        if lo == hi:
            return self.c(0.0)
        span = hi - lo
        a = math_d.absf(arith_d.subf(v, self.c(lo)))
        extra = arith_d.remf(a, self.c(span))
        flips = math_d.floor(arith_d.divf(a, self.c(span)))
        even = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, arith_d.remf(flips, self.c(2.0)), self.c(0.0))
        return arith_d.select(even, arith_d.addf(extra, self.c(lo)),
                              arith_d.addf(arith_d.subf(self.c(span), extra), self.c(lo)))

    def pad(self, v: ir.Value) -> ir.Value:
        """ATen ``compute_coordinates``: the padding mode applied to a source coordinate."""
        if self.padding == "border":
            return self.clip(v)
        if self.padding == "reflection":
            return self.clip(self.reflect(v))
        return v

    def tap(self, f: ir.Value) -> Tuple[ir.Value, ir.Value]:
        """``(in_bounds, index)`` of an integral coordinate ``f``: whether ``0 <= f <= size-1``
        (false for NaN) and ``f`` clamped into the axis as an ``index``."""
        inside = arith_d.andi(arith_d.cmpf(arith_d.CmpFPredicate.OGE, f, self.c(0.0)),
                              arith_d.cmpf(arith_d.CmpFPredicate.OLE, f, self.c(self.size - 1)))
        safe = arith_d.minnumf(arith_d.maxnumf(f, self.c(0.0)), self.c(self.size - 1))
        i64 = ir.IntegerType.get_signless(64)
        return inside, arith_d.index_cast(ir.IndexType.get(), arith_d.fptosi(i64, safe))

    def taps(self, g: ir.Value, mode: str) -> List[Tuple[ir.Value, ir.Value, Optional[ir.Value]]]:
        """The ``(in_bounds, index, weight)`` taps of grid value ``g`` (weight None: 1)."""
        v = self.unnormalize(g)
        if mode == "nearest":
            return [self.tap(math_d.roundeven(self.pad(v))) + (None,)]
        if mode == "linear":
            v = self.pad(v)
            f0 = math_d.floor(v)
            t = arith_d.subf(v, f0)
            return [self.tap(f0) + (arith_d.subf(self.c(1.0), t),),
                    self.tap(arith_d.addf(f0, self.c(1.0))) + (t,)]
        f0 = math_d.floor(v)
        t = arith_d.subf(v, f0)
        out = []
        for k, w in enumerate(self._cubic_weights(t)):
            f = arith_d.addf(f0, self.c(k - 1.0))
            if self.padding != "zeros":  # the tap's index is padded, then truncated like ATen
                f = math_d.trunc(self.pad(f))
            out.append(self.tap(f) + (w,))
        return out

    def _cubic_weights(self, t: ir.Value) -> List[ir.Value]:
        """ATen ``get_cubic_upsample_coefficients``: Keys' kernel at ``t + 1, t, 1 - t, 2 - t``."""
        a = CUBIC_A

        def near(x):   # ((A + 2) x - (A + 3)) x^2 + 1, |x| <= 1
            p = arith_d.subf(arith_d.mulf(self.c(a + 2), x), self.c(a + 3))
            return arith_d.addf(arith_d.mulf(arith_d.mulf(p, x), x), self.c(1.0))

        def far(x):    # ((A x - 5A) x + 8A) x - 4A, 1 < |x| < 2
            p = arith_d.subf(arith_d.mulf(self.c(a), x), self.c(5 * a))
            p = arith_d.addf(arith_d.mulf(p, x), self.c(8 * a))
            return arith_d.subf(arith_d.mulf(p, x), self.c(4 * a))

        one_t = arith_d.subf(self.c(1.0), t)
        return [far(arith_d.addf(t, self.c(1.0))), near(t), near(one_t),
                far(arith_d.addf(one_t, self.c(1.0)))]


def _convert(v: ir.Value, src: str, dst: str) -> ir.Value:
    if src == dst:
        return v
    ty = dtypes.to_ir_type(dst)
    wider = dtypes.bit_width(dst) > dtypes.bit_width(src)
    return arith_d.extf(ty, v) if wider else arith_d.truncf(ty, v)


def grid_sample(x, grid, mode: str = "linear", padding_mode: str = "zeros", align_corners: bool = False,
                name: Optional[str] = None) -> Tensor:
    """Sample ``x`` at the normalized coordinates of ``grid`` (see the module docstring)::

        out[n, c, o...] = sum over taps t of  w_t * (x[n, c, t...] if t inside x else 0)

    Parameters
    ----------
    x : Tensor or numpy.ndarray, shape (N, C, S_1, .., S_D), D >= 1
        float16, bfloat16, float32 or float64; static spatial sizes.
    grid : Tensor or numpy.ndarray, shape (N, O_1, .., O_D, D)
        Any of those float dtypes; ``grid[..., 0]`` is the coordinate along ``S_D`` (x),
        ``grid[..., 1]`` along ``S_{D-1}`` (y), ...; -1 and 1 are the input's extremes.
    mode : str
        ``nearest``, ``linear`` (bilinear/trilinear) or ``cubic`` (bicubic, A = -0.75).
    padding_mode : str
        ``zeros`` (taps outside the input read 0), ``border`` (the edge value) or
        ``reflection`` (reflected about the borders).
    align_corners : bool
        Whether -1 and 1 are the centres of the corner pixels (else their outer edges).

    Returns
    -------
    Tensor (N, C, O_1, .., O_D), x's dtype. The arithmetic is float64 when x or grid is,
    else float32.

    Raises
    ------
    BuildError
        For an unknown mode or padding mode, a non-float x or grid, x of rank < 3, a grid whose
        rank, batch or last dim does not match x
        (``grid_sample: argument 'grid' has shape (1, 4, 4, 3); expected (1, O_1, O_2, 2) for x
        (1, 2, 5, 5)``), symbolic spatial sizes, or an empty spatial axis to sample from.
    """
    op = "grid_sample"
    fn = emit.function_of(op, x, grid)
    x = emit.tensor_arg(op, "x", x)
    grid = emit.tensor_arg(op, "grid", grid)
    for arg, v, allowed in (("mode", mode, MODES), ("padding_mode", padding_mode, PADDING_MODES)):
        if v not in allowed:
            raise BuildError(f"{op}: argument '{arg}' is {v!r}; expected one of {list(allowed)}")
    for arg, t in (("x", x), ("grid", grid)):
        if not dtypes.is_float(t.dtype):
            raise BuildError(f"{op}: argument '{arg}' has dtype {t.dtype}; expected a float dtype "
                             "(float16, bfloat16, float32, float64)")
    if x.ndim < 3:
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected (N, C, S_1, ..)"
                         " with at least one spatial dim")
    d = x.ndim - 2
    if grid.ndim != x.ndim or grid.shape[-1] != d or grid.shape[0] != x.shape[0]:
        outs = ", ".join(f"O_{i + 1}" for i in range(d))
        raise BuildError(f"{op}: argument 'grid' has shape {format_shape(grid.shape)}; expected "
                         f"({x.shape[0]}, {outs}, {d}) for x {format_shape(x.shape)}")
    sizes = x.shape[2:]
    if not all(isinstance(s, int) for s in sizes):
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected static "
                         "spatial sizes")
    out_shape = (x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1])
    if 0 in sizes and 0 not in out_shape:
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected non-empty "
                         f"spatial axes to sample {format_shape(out_shape)} from")
    nm = emit.op_name(fn, op, name)
    if 0 in out_shape:
        return Tensor(emit.empty(out_shape, x.dtype), fn)
    ct = "float64" if "float64" in (x.dtype, grid.dtype) else "float32"
    axes = [_Axis(s, ct, padding_mode, bool(align_corners)) for s in sizes]
    rank = 2 + d
    dim = ir.AffineDimExpr.get
    maps = [ir.AffineMap.get(rank, 0, [dim(0)] + [dim(2 + i) for i in range(d)] +
                             [ir.AffineConstantExpr.get(k)]) for k in range(d)]

    def body(*args):
        g = [_convert(a, grid.dtype, ct) for a in args[:d]]
        per_axis = [axes[i].taps(g[d - 1 - i], mode) for i in range(d)]
        lead = [linalg_d.IndexOp(0).result, linalg_d.IndexOp(1).result]
        acc = None
        for combo in itertools.product(*per_axis):
            inside = combo[0][0]
            for t in combo[1:]:
                inside = arith_d.andi(inside, t[0])
            v = _convert(tensor_d.ExtractOp(x.value, lead + [t[1] for t in combo]).result, x.dtype, ct)
            v = arith_d.select(inside, v, emit.scalar(0.0, ct))
            for t in combo:
                if t[2] is not None:
                    v = arith_d.mulf(v, t[2])
            acc = v if acc is None else arith_d.addf(acc, v)
        return [_convert(acc, ct, x.dtype)]

    res = emit.generic(nm, [grid.value] * d, maps, [emit.empty(out_shape, x.dtype)],
                       [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)
