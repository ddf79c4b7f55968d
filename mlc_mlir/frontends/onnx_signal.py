"""ONNX converters of signal processing: DFT, STFT and the window generators HannWindow,
HammingWindow, BlackmanWindow. Conventions as in :mod:`.onnx_ops`.

* ``DFT``: a complex tensor is its real and imaginary parts on a last axis of size 2 (size 1:
  real). The transform along ``axis`` is two ``ops.matmul`` with the constant ``cos`` and
  ``sin`` matrices of ``exp(-+2 pi i n k / L)`` (``L = dft_length``; shorter inputs are zero
  padded, which drops matrix rows, longer ones truncated): ``O(L^2)`` multiply-adds per
  transform, as a dense DFT, not an FFT. ``onesided`` keeps the ``L // 2 + 1`` first bins; an
  inverse ``onesided`` transform (``irfft``) reads those bins and returns the real signal of
  length ``L`` (the Hermitian bins weighted twice). ``dft_length`` and ``axis`` are static.
* ``STFT``: the frames (a constant-index ``ops.take``), times the window, and a ``DFT`` of
  ``frame_length`` along the frame axis (``onesided`` by default).
* Window generators: the constant window of a static ``size`` (``periodic``: denominator
  ``size``, else ``size - 1``), in ``output_datatype``.

Source: ONNX operator spec (DFT-17/20, STFT-17, HannWindow-17, ...), ``onnx.reference.ops``
(``op_dft``, ``op_stft``, ``_op_common_window``); ``numpy.fft`` for the conventions.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .. import ops
from .onnx_registry import ONNX_DTYPES, NodeInputs, OPSETS, np_dtype, register, shape_of


def _dft_last(re, im, length: int, inverse: bool, onesided: bool) -> Tuple[object, Optional[object]]:
    """The DFT of ``re + i im`` (``im`` None: real) along the last axis (R, n) with length
    ``length``: ``(real, imaginary)`` parts (R, K); an inverse onesided transform returns
    ``(real, None)`` (R, length)."""
    n_in = shape_of(re)[-1]
    dt = np_dtype(re)
    if inverse and onesided:  # rows: the bins 0..L//2, columns: the samples
        bins = length // 2 + 1
        used = min(n_in, bins)
        k = np.arange(used)[:, None]
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0) / length
        theta = 2.0 * np.pi * k * np.arange(length)[None, :] / length
        c, s = (weight * np.cos(theta)).astype(dt), (weight * np.sin(theta)).astype(dt)
    else:
        out = length // 2 + 1 if onesided else length
        used = min(n_in, length)
        theta = 2.0 * np.pi * np.arange(used)[:, None] * np.arange(out)[None, :] / length
        scale = 1.0 / length if inverse else 1.0
        c, s = (scale * np.cos(theta)).astype(dt), (scale * np.sin(theta)).astype(dt)
    if used < n_in:
        re = ops.slice(re, [0], [used], axes=[1])
        im = None if im is None else ops.slice(im, [0], [used], axes=[1])
    if inverse:  # exp(+i theta): (a + ib)(cos + i sin) = a cos - b sin + i (b cos + a sin)
        yre = ops.matmul(re, c) if im is None else ops.subtract(ops.matmul(re, c), ops.matmul(im, s))
        if onesided:
            return yre, None
        yim = ops.matmul(re, s) if im is None else ops.add(ops.matmul(im, c), ops.matmul(re, s))
        return yre, yim
    # exp(-i theta): (a + ib)(cos - i sin) = a cos + b sin + i (b cos - a sin)
    yre = ops.matmul(re, c) if im is None else ops.add(ops.matmul(re, c), ops.matmul(im, s))
    yim = ops.negative(ops.matmul(re, s)) if im is None else ops.subtract(ops.matmul(im, c), ops.matmul(re, s))
    return yre, yim


def dft(n: NodeInputs, x, axis: int, length: Optional[int], inverse: bool, onesided: bool):
    """The ONNX DFT of ``x`` (..., 1 or 2) along ``axis`` (normalized, not the last)."""
    shape = shape_of(x)
    rank = len(shape)
    if shape[-1] not in (1, 2):
        raise n.fail(f"input 'input' has shape {shape}; expected a last axis of size 1 (real) or 2 (complex)")
    if not 0 <= axis < rank - 1:
        raise n.fail(f"axis {axis}; expected in [0, {rank - 1}) (not the complex axis)")
    if length is None:
        length = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if length < 1:
        raise n.fail(f"dft_length is {length}; expected >= 1")
    perm = [d for d in range(rank - 1) if d != axis] + [axis]
    rest = [shape[d] for d in perm[:-1]]
    rows = int(np.prod(rest, dtype=np.int64))

    def part(i):
        p = ops.reshape(ops.slice(x, [i], [i + 1], axes=[rank - 1]), shape[:-1])
        return ops.reshape(ops.permute(p, perm), (rows, shape[axis]))

    yre, yim = _dft_last(part(0), part(1) if shape[-1] == 2 else None, length, inverse, onesided)
    back = list(np.argsort(perm))

    def unpart(y):
        y = ops.reshape(y, tuple(rest) + (shape_of(y)[-1],))
        return ops.unsqueeze(ops.permute(y, back), [rank - 1])

    return unpart(yre) if yim is None else ops.concat([unpart(yre), unpart(yim)], axis=rank - 1)


@register("DFT", opsets=(17, OPSETS[1]))
def _dft(n: NodeInputs) -> List[object]:
    x = n.t(0)
    rank = len(shape_of(x))
    length = int(np.asarray(n.np(1, "dft_length")).reshape(-1)[0]) if n.has(1) else None
    if n.opset >= 20:
        axis = int(np.asarray(n.np(2, "axis")).reshape(-1)[0]) if n.has(2) else -2
    else:
        axis = int(n.attr("axis", 1))
    if not -rank <= axis < rank:
        raise n.fail(f"axis {axis}; expected in [{-rank}, {rank})")
    return [dft(n, x, axis % rank, length, bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0)))]


@register("STFT", opsets=(17, OPSETS[1]))
def _stft(n: NodeInputs) -> List[object]:
    """Frames ``[f * frame_step, f * frame_step + frame_length)`` of the signal (batch, length,
    1 or 2), ``1 + (length - frame_length) // frame_step`` of them, each times the window,
    then the DFT of ``frame_length`` along the frame: (batch, frames, bins, 2)."""
    x = n.t(0)
    shape = shape_of(x)
    if len(shape) != 3:
        raise n.fail(f"input 'signal' has shape {shape}; expected (batch, length, 1 or 2)")
    step = int(np.asarray(n.np(1, "frame_step")).reshape(-1)[0])
    window = n.t(2) if n.has(2) else None
    if n.has(3):
        frame = int(np.asarray(n.np(3, "frame_length")).reshape(-1)[0])
    else:
        frame = shape_of(window)[0] if window is not None else shape[1]
    if step < 1 or not 1 <= frame <= shape[1]:
        raise n.fail(f"frame_step {step} and frame_length {frame}; expected >= 1 and a frame length in [1, "
                     f"{shape[1]}]")
    if window is not None and shape_of(window) != (frame,):
        raise n.fail(f"input 'window' has shape {shape_of(window)}; expected ({frame},)")
    frames = 1 + (shape[1] - frame) // step
    idx = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).reshape(-1).astype(np.int64)
    y = ops.reshape(ops.take(x, idx, axis=1), (shape[0], frames, frame, shape[2]))
    if window is not None:
        w = ops.reshape(window, (1, 1, frame, 1)) if not isinstance(window, np.ndarray) else \
            np.reshape(window, (1, 1, frame, 1)).astype(np_dtype(x))
        y = ops.multiply(y, w)
    return [dft(n, y, 2, frame, False, bool(n.attr("onesided", 1)))]


def _window(n: NodeInputs, terms) -> List[object]:
    """``sum_j a_j cos(2 pi j i / N)`` for ``i < size`` (``terms``: the ``a_j``)."""
    size = int(np.asarray(n.np(0, "size")).reshape(-1)[0])
    if size < 1:
        raise n.fail(f"input 'size' is {size}; expected >= 1")
    to = int(n.attr("output_datatype", 1))
    if to not in ONNX_DTYPES or ONNX_DTYPES[to] == "bfloat16" or to == 9:
        raise n.fail(f"attribute 'output_datatype' is {to}; expected one of "
                     f"{sorted(k for k, v in ONNX_DTYPES.items() if v != 'bfloat16' and k != 9)}")
    denom = size if n.attr("periodic", 1) else size - 1
    i = np.arange(size, dtype=np.float64)
    w = sum(a * np.cos(2.0 * np.pi * j * i / denom) for j, a in enumerate(terms)) if denom else np.ones(size)
    return [w.astype(ONNX_DTYPES[to])]


@register("HannWindow", opsets=(17, OPSETS[1]))
def _hann(n: NodeInputs) -> List[object]:
    return _window(n, (0.5, -0.5))


@register("HammingWindow", opsets=(17, OPSETS[1]))
def _hamming(n: NodeInputs) -> List[object]:
    """``alpha = 25 / 46`` (the ONNX reference; 0.54 rounded)."""
    return _window(n, (25.0 / 46.0, -21.0 / 46.0))


@register("BlackmanWindow", opsets=(17, OPSETS[1]))
def _blackman(n: NodeInputs) -> List[object]:
    return _window(n, (0.42, -0.5, 0.08))
