"""Transposed 2-D convolution (PyTorch ``ConvTranspose2d``, ONNX ``ConvTranspose``) as
``SH * SW`` dense convolutions, one per output phase (the sub-pixel decomposition): output
row ``oh = SH * q + r`` receives input row ``ih`` through kernel row ``kh`` exactly when
``oh + top = SH * ih + DH * kh``, so the rows of phase ``r`` are a stride-1 convolution of the
input with the kernel rows ``kh`` for which ``DH * kh = r + top (mod SH)``: every
``SH / gcd(DH, SH)``-th row, flipped, at dilation ``DH / gcd(DH, SH)``. Each phase is the
builder's :func:`~mlc_mlir.builder.nn.conv2d` (so the default schedules and layout rewrites
apply) of the input cropped or padded to the rows it reads, and its result is inserted with
strides ``(SH, SW)`` at offset ``(rh, rw)`` into the output (``tensor.insert_slice``). No
multiply touches an inserted zero, unlike a convolution over the input dilated by the stride.
The phase filters are read from the weight by one ``linalg.generic`` each (``tensor.extract``
at ``first - m * step``: flipped and strided, in/out channels swapped per group; together one
pass over the weight).
Source: Shi et al., "Real-Time Single Image and Video Super-Resolution Using an Efficient
Sub-Pixel Convolutional Neural Network" (CVPR 2016) and "Is the deconvolution layer the same
as a convolutional layer?" (2016); Dumoulin & Visin, "A guide to convolution arithmetic for
deep learning" (2016), section 4.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import emitters
from . import elementwise
from . import linalg_emit as emit
from .nn import _check_x, _padding4, conv2d
from .shape import reshape, slice as slice_
from .tensor import Tensor


@dataclasses.dataclass(frozen=True)
class Phase:
    """One output phase ``r`` along one spatial axis of a transposed convolution.

    Attributes
    ----------
    count : int
        Output elements of the phase, ``len(range(r, out, stride))``.
    taps : int
        Kernel elements that reach the phase (0: its outputs are the bias alone).
    first, step : int
        The phase filter's element ``m`` is kernel element ``first - m * step`` (flipped).
    dilation : int
        The phase convolution's dilation, ``dilation / gcd(dilation, stride)``.
    start : int
        Input element read by the phase filter's element 0 for output 0 (negative: before the
        input, zero padding).
    """

    count: int
    taps: int
    first: int
    step: int
    dilation: int
    start: int

    @property
    def span(self) -> int:
        """Input elements the phase reads: ``count + dilation * (taps - 1)``."""
        return self.count + self.dilation * (self.taps - 1)


def phases(k: int, stride: int, dil: int, pad: int, out: int):
    """The ``stride`` phases (:class:`Phase`, ``r = 0 .. stride - 1``) of one spatial axis with
    kernel ``k``, ``stride``, dilation ``dil``, leading padding ``pad`` and ``out`` outputs."""
    step = stride // math.gcd(dil, stride)
    res = []
    for r in range(stride):
        first_tap = next((t for t in range(min(k, step)) if (r + pad - t * dil) % stride == 0), None)
        count = len(range(r, out, stride))
        if first_tap is None or count == 0:
            res.append(Phase(count, 0, 0, step, 1, 0))
            continue
        taps = len(range(first_tap, k, step))
        last = first_tap + (taps - 1) * step
        res.append(Phase(count, taps, last, step, dil // math.gcd(dil, stride),
                         (r + pad - last * dil) // stride))
    return res


def conv_transpose2d(x, weight, bias=None, strides=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1, name: Optional[str] = None) -> Tensor:
    """Transposed convolution (the gradient of :func:`~mlc_mlir.builder.nn.conv2d` with
    respect to its input), NCHW input and ``(C, F/groups, KH, KW)`` weight, as one
    convolution per output phase (module docstring).

    Parameters
    ----------
    x : Tensor (N, C, H, W), float dtype
    weight : Tensor or numpy.ndarray (C, F/groups, KH, KW)
        x's dtype.
    bias : Tensor or numpy.ndarray (F,), optional
    strides, dilation : int or (int, int)
        >= 1.
    padding : int, (ph, pw) or (top, left, bottom, right)
        Removed from the full output, >= 0.
    output_padding : int or (int, int)
        Extra rows/columns at the bottom/right, >= 0 (PyTorch keeps them below the stride or
        dilation; ONNX's ``output_shape`` may ask for more).
    groups : int
        Divides C and F.

    Returns
    -------
    Tensor (N, F, OH, OW)
        ``OH = (H - 1) * SH - top - bottom + DH * (KH - 1) + output_padding_h + 1`` (same for
        OW); x's dtype.

    Raises
    ------
    BuildError
        ``conv_transpose2d: argument 'weight' has shape (4, 2, 3, 3); expected (8, F/groups, KH,
        KW) for x (1, 8, 5, 5)``; also for wrong ranks, groups, bias, strides or paddings, or an
        empty output.
    """
    op = "conv_transpose2d"
    fn = emit.function_of(op, x, weight, bias)
    x = _check_x(op, x, 4, "N, C, H, W", float_only=True)
    w = emit.as_tensor(op, "weight", fn, weight, x.dtype)
    n, c, h, wd = x.shape
    if w.ndim != 4 or w.shape[0] != c:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(w.shape)}; expected "
                         f"({c}, F/groups, KH, KW) for x {format_shape(x.shape)}")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or c % groups:
        raise BuildError(f"{op}: argument 'groups' is {groups!r}; expected an int >= 1 dividing the "
                         f"{c} input channels")
    sh, sw = emit.int_tuple(op, "strides", strides, 2, minimum=1)
    dh, dw = emit.int_tuple(op, "dilation", dilation, 2, minimum=1)
    oph, opw = emit.int_tuple(op, "output_padding", output_padding, 2, minimum=0)
    top, left, bottom, right = _padding4(op, padding)
    _, fg, kh, kw = w.shape
    f = fg * groups
    if bias is not None and emit.operand_shape(op, "bias", bias, x.dtype) != (f,):
        raise BuildError(f"{op}: argument 'bias' has shape "
                         f"{format_shape(emit.operand_shape(op, 'bias', bias, x.dtype))}; expected "
                         f"({f},) for {f} output channels")
    oh = (h - 1) * sh - top - bottom + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - left - right + dw * (kw - 1) + opw + 1
    if oh < 1 or ow < 1:
        raise BuildError(f"{op}: the output would be {oh}x{ow} for x {format_shape(x.shape)}, kernel "
                         f"{kh}x{kw} and padding {(top, left, bottom, right)}; expected at least 1x1")
    nm = emit.op_name(fn, op, name)
    cg = c // groups
    we = reshape(w, [groups, cg, fg, kh, kw], name=f"{nm}.w_groups")
    if bias is not None:
        bias = emit.operand(op, "bias", fn, bias, x.dtype, f"{nm}.bias")
    rows = phases(kh, sh, dh, top, oh)
    cols = phases(kw, sw, dw, left, ow)
    live = [(rh, rw) for rh, ph in enumerate(rows) for rw, pw in enumerate(cols)
            if _reaches(ph, h) and _reaches(pw, wd)]
    # every output element in some phase's convolution: the bias is its epilogue
    covered = sum(rows[rh].count * cols[rw].count for rh, rw in live) == oh * ow
    single = covered and len(live) == 1   # one phase (stride 1): the whole output
    convs = [((rh, rw), _phase_conv(x, we, rows[rh], cols[rw], bias if covered else None, groups,
                                    nm if single else f"{nm}.phase{rh}_{rw}")) for rh, rw in live]
    if single:
        return convs[0][1]
    out = Tensor(emitters.empty([n, f, oh, ow], x.dtype, f"{nm}.out") if covered
                 else emitters.filled([n, f, oh, ow], x.dtype, 0, f"{nm}.zeros"), fn)
    for (rh, rw), y in convs:
        v = tensor_d.InsertSliceOp(y.value, out.value, [], [], [], [0, 0, rh, rw], list(y.shape),
                                   [1, 1, sh, sw]).result
        emitters.set_name(v.owner, f"{nm}.phase{rh}_{rw}.insert")
        out = Tensor(v, fn)
    if bias is not None and not covered:
        out = elementwise.add(out, reshape(bias, (f, 1, 1), name=f"{nm}.bias_reshape"),
                              name=f"{nm}.bias_add")
    return out


def _reaches(p: Phase, size: int) -> bool:
    """Whether phase ``p`` has outputs that some kernel element connects to one of the
    ``size`` input elements (otherwise its outputs are zero, or the bias)."""
    return p.count > 0 and p.taps > 0 and p.start < size and p.start + p.span > 0


def _phase_conv(x: Tensor, we: Tensor, ph: Phase, pw: Phase, bias, groups: int, nm: str) -> Tensor:
    """The convolution of one output phase ``(ph, pw)`` (both :func:`_reaches` the input): the
    input cropped or zero padded to the rows and columns it reads, convolved with the phase
    filter (:func:`_phase_filter`), plus ``bias`` when given."""
    h, wd = x.shape[2], x.shape[3]
    lo = [ph.start, pw.start]
    hi = [ph.start + ph.span, pw.start + pw.span]
    crop = [max(lo[0], 0), max(lo[1], 0)], [min(hi[0], h), min(hi[1], wd)]
    xs = x
    if crop != ([0, 0], [h, wd]):
        xs = slice_(x, crop[0], crop[1], axes=[2, 3], name=f"{nm}.crop")
    pad = (max(-lo[0], 0), max(-lo[1], 0), max(hi[0] - h, 0), max(hi[1] - wd, 0))
    wf = _phase_filter(we, ph, pw, groups, nm)
    return conv2d(xs, wf, bias, strides=1, padding=pad, dilation=(ph.dilation, pw.dilation),
                  groups=groups, name=nm)


def _phase_filter(we: Tensor, ph: Phase, pw: Phase, groups: int, nm: str) -> Tensor:
    """The ``(F, C/groups, taps_h, taps_w)`` filter of one phase from the grouped weight
    ``we`` ``(groups, C/groups, F/groups, KH, KW)``: element ``(g, f, c, mh, mw)`` is
    ``we[g, c, f, first_h - mh * step_h, first_w - mw * step_w]``, read with ``tensor.extract``
    (an indexing map with a negative coefficient is one that linalg tiling cannot slice)."""
    _, cg, fg, _, _ = we.shape
    idx_type = ir.IndexType.get()

    def body(_o):
        i = [linalg_d.IndexOp(k).result for k in range(5)]
        tap = []
        for p, m in ((ph, i[3]), (pw, i[4])):
            first = arith_d.ConstantOp(idx_type, p.first).result
            step = arith_d.ConstantOp(idx_type, p.step).result
            tap.append(arith_d.subi(first, arith_d.muli(m, step)))
        return [tensor_d.ExtractOp(we.value, [i[0], i[2], i[1], tap[0], tap[1]]).result]

    out = emitters.empty([groups, fg, cg, ph.taps, pw.taps], we.dtype, f"{nm}.filter")
    v = emitters.generic(f"{nm}.filter", [], [], [out], [ir.AffineMap.get_identity(5)],
                         ["parallel"] * 5, body)[0]
    return reshape(Tensor(v, we.fn), [groups * fg, cg, ph.taps, pw.taps], name=f"{nm}.filter_conv")
