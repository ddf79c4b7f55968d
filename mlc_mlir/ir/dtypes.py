"""dtype tables: names, numpy dtypes and MLIR element types.

A table, not an if-chain (the JAX ``dtype_to_ir_type`` idea). dtype names are numpy's
(``float32``, ``int64``, ...); ``bfloat16`` is represented in numpy by ``ml_dtypes.bfloat16``.
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from ..errors import BuildError

try:  # bfloat16 in numpy comes from ml_dtypes (a dependency of jax and onnx)
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None

_IR_TYPES = {
    "float32": lambda: ir.F32Type.get(),
    "float64": lambda: ir.F64Type.get(),
    "float16": lambda: ir.F16Type.get(),
    "bfloat16": lambda: ir.BF16Type.get(),
    "int8": lambda: ir.IntegerType.get_signless(8),
    "int16": lambda: ir.IntegerType.get_signless(16),
    "int32": lambda: ir.IntegerType.get_signless(32),
    "int64": lambda: ir.IntegerType.get_signless(64),
    "bool": lambda: ir.IntegerType.get_signless(1),
}

_FROM_ASM = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i8": "int8",
             "i16": "int16", "i32": "int32", "i64": "int64", "i1": "bool"}

FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64"})
ALL_DTYPES = frozenset(_IR_TYPES)

_BITS = {"float32": 32, "float64": 64, "float16": 16, "bfloat16": 16, "int8": 8, "int16": 16,
         "int32": 32, "int64": 64, "bool": 1}


def canonical_dtype(dtype) -> str:
    """Return the dtype name (``'float32'``) of a name, numpy dtype or numpy scalar type.

    Raises
    ------
    BuildError
        If the dtype is not one of :data:`ALL_DTYPES`.
    """
    if isinstance(dtype, str) and dtype in _IR_TYPES:
        return dtype
    try:
        npd = np.dtype(dtype)
    except TypeError:
        raise BuildError(f"dtype: {dtype!r} is not a dtype; expected one of {sorted(ALL_DTYPES)}")
    if _BF16 is not None and npd == _BF16:
        return "bfloat16"
    name = npd.name
    if name not in _IR_TYPES:
        raise BuildError(f"dtype: {name} is not supported; expected one of {sorted(ALL_DTYPES)}")
    return name


def to_ir_type(dtype) -> ir.Type:
    """MLIR element type of a dtype (needs an active ``ir.Context``)."""
    return _IR_TYPES[canonical_dtype(dtype)]()


def to_numpy_dtype(dtype) -> np.dtype:
    """numpy dtype of a dtype name (``bfloat16`` needs ``ml_dtypes``)."""
    name = canonical_dtype(dtype)
    if name == "bfloat16":
        if _BF16 is None:
            raise BuildError("dtype: bfloat16 needs the ml_dtypes package")
        return _BF16
    return np.dtype(name)


def from_ir_type(t: ir.Type) -> str:
    """dtype name of an MLIR element type.

    Raises
    ------
    BuildError
        For element types without a numpy counterpart (index, complex, ...).
    """
    name = _FROM_ASM.get(str(t))
    if name is not None:
        return name
    raise BuildError(f"dtype: MLIR element type {t} has no numpy dtype")


def is_float(dtype: str) -> bool:
    """True for floating-point dtype names."""
    return dtype in FLOAT_DTYPES


def bit_width(dtype: str) -> int:
    """Bits of one element of the dtype (``bool`` is 1)."""
    return _BITS[dtype]
