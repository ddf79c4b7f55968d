"""``full``: a tensor of one value, of a static or symbolic shape, as a ``linalg.fill`` of a
``tensor.empty`` (no materialized constant: a fill of the output's buffer). Its companion for
index sequences is :func:`~mlc_mlir.builder.indexing.arange`.

Source: numpy ``full``; ONNX ``ConstantOfShape``; TVM TOPI ``full``.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..errors import BuildError
from ..ir import dtypes
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
