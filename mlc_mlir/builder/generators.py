"""Tensors generated from sizes alone: ``full`` (one value everywhere) and ``arange`` (an index
sequence), with static or symbolic sizes.

A static ``arange`` is a constant; one whose length is a symbolic size (``arange(seq)`` of a
model exported with a dynamic sequence length) is a ``linalg.generic`` writing ``start + i *
step`` from ``linalg.index``. ``full`` is a ``linalg.fill`` of a ``tensor.empty`` (no
materialized constant: a fill of the output's buffer).

Source: numpy ``full`` / ``arange``; ONNX ``ConstantOfShape`` / ``Range``; TVM TOPI ``full`` and
``arange`` (an index computation); MLIR ``linalg.index``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .._mlir import arith_d, ir, linalg_d
from ..errors import BuildError
from ..ir import dtypes
from ..ir.symbolic import SymDim
from . import linalg_emit as emit
from .tensor import Tensor


def _dtype(op: str, dtype: str) -> str:
    if dtype not in dtypes.ALL_DTYPES:
        raise BuildError(f"{op}: argument 'dtype' is {dtype!r}; expected one of {sorted(dtypes.ALL_DTYPES)}")
    return dtype


def full(shape: Sequence, value, dtype: str = "float32", name: Optional[str] = None) -> Tensor:
    """A tensor of ``shape`` (ints and symbolic sizes) holding ``value`` everywhere
    (``tensor.empty`` + ``linalg.fill``, named ``name``); called inside an open function.

    Parameters
    ----------
    shape : sequence of int or SymDim
    value : int, float or bool
    dtype : str
        Any dtype of :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`; ``bool`` is the int8 0/1 mask.

    Raises
    ------
    BuildError
        For a negative size, an unknown dtype or no open function.
    """
    dt = "int8" if dtype == "bool" else _dtype("full", dtype)
    fn = emit.function_of("full")
    v = emit.filled(list(shape), dt, int(value) if isinstance(value, bool) else value,
                    emit.op_name(fn, "full", name))
    return Tensor(v, fn)


def arange(start, stop, step=1, dtype: str = "int64", name: Optional[str] = None) -> Tensor:
    """``[start, start + step, ...]`` below ``stop`` (``numpy.arange``), of ``dtype``.

    Parameters
    ----------
    start, stop : int, float or SymDim
        Static bounds give a constant; a symbolic ``stop`` (or ``start``) with an integer
        ``step`` gives a ``tensor<?x...>`` computed at run time, of length
        ``ceil((stop - start) / step)`` (the bounds of a symbolic size are its own: ``stop >=
        start`` is assumed, as torch.export's range constraints guarantee).
    step : int or float
        Nonzero; symbolic bounds need an int ``step`` of ``1`` or ``-1`` (the length of any
        other step is not an affine size).
    dtype : str

    Raises
    ------
    BuildError
        For ``step == 0``, a symbolic bound with another step, a float dtype with symbolic
        bounds, or no open function.
    """
    dt = _dtype("arange", dtype)
    if step == 0:
        raise BuildError("arange: argument 'step' is 0; expected a nonzero step")
    symbolic = isinstance(start, SymDim) or isinstance(stop, SymDim)
    if not symbolic:
        return emit.constant_op(np.arange(start, stop, step).astype(dtypes.to_numpy_dtype(dt)), name)
    if step not in (1, -1) or not isinstance(step, int):
        raise BuildError(f"arange: argument 'step' is {step!r} with symbolic bounds ({start}, {stop}); "
                         "expected 1 or -1")
    length = stop - start if step == 1 else start - stop
    fn = emit.function_of("arange")
    nm = emit.op_name(fn, "arange", name)
    et = dtypes.to_ir_type(dt)
    first = start.materialize() if isinstance(start, SymDim) else None
    init = emit.empty([length], dt, nm)

    def body(_out):
        i = linalg_d.IndexOp(0).result
        s = first if first is not None else arith_d.ConstantOp(ir.IndexType.get(), int(start)).result
        v = arith_d.addi(s, i) if step == 1 else arith_d.subi(s, i)
        if dtypes.is_float(dt):
            return [arith_d.sitofp(et, arith_d.index_cast(ir.IntegerType.get_signless(64), v))]
        return [arith_d.index_cast(et, v)]

    res = emit.generic(nm, [], [], [init], [emit.identity_map(1)], ["parallel"], body)
    return Tensor(res[0], fn)
