"""Emission helpers shared by the op inventory: operand coercion, constants, empty/fill,
broadcasting indexing maps, ``linalg.generic`` construction and op naming.

Every op of :mod:`mlc_mlir.ops` is written in terms of these, so each concern (how a numpy
array becomes a ``dense_resource`` constant, how numpy broadcasting becomes an affine map, how
an op gets its ``mlc.name``) lives in one place.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.constants import elements_attr
from ..ir.module import OP_NAME_ATTR
from .graph_builder import FunctionBuilder, Tensor

Operand = object  # Tensor | numpy.ndarray | python scalar


def function_of(op: str, *args) -> FunctionBuilder:
    """The FunctionBuilder of the Tensors among ``args`` (one function only).

    Raises
    ------
    BuildError
        If no argument is a Tensor, or Tensors come from different functions.
    """
    fns = {id(a.fn): a.fn for a in _flatten(args) if isinstance(a, Tensor)}
    if not fns:
        raise BuildError(f"{op}: at least one argument must be a Tensor of the function being built")
    if len(fns) > 1:
        raise BuildError(f"{op}: arguments come from different functions")
    fn = next(iter(fns.values()))
    fn._check_open(op)
    return fn


def _flatten(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


class Reserved(str):
    """An op name already claimed in its function: a composite op (softmax, avg_pool2d)
    claims its name once and hands it to the sub-op that produces its result."""


def op_name(fn: FunctionBuilder, op: str, name: Optional[str]) -> str:
    """The ``mlc.name`` for a new op: the user's ``name=`` or a unique default from ``op``
    (a :class:`Reserved` name is used as is)."""
    if isinstance(name, Reserved):
        return name
    return Reserved(fn.claim_op_name(name, op) if name is not None else fn.unique_op_name(op))


def set_name(operation, name: str) -> None:
    """Attach ``mlc.name = name`` to an op (the TensorIR block name)."""
    operation = getattr(operation, "operation", operation)
    operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(name)


def tensor_type(shape: Sequence[int], dtype: str) -> ir.RankedTensorType:
    """``RankedTensorType`` of a static shape and dtype name."""
    return ir.RankedTensorType.get(list(shape), dtypes.to_ir_type(dtype))


def constant(fn: FunctionBuilder, array: np.ndarray, name: Optional[str] = None) -> Tensor:
    """Emit ``arith.constant dense_resource<...>`` holding ``array`` (no copy through IR text).

    Raises
    ------
    BuildError
        If the array's dtype is unsupported.
    """
    dtype = dtypes.canonical_dtype(array.dtype)
    arr = np.ascontiguousarray(array, dtype=dtypes.to_numpy_dtype(dtype))
    fn.builder._constants.append(arr)
    t = tensor_type(arr.shape, dtype)
    cname = name or fn.unique_op_name("constant")
    attr = elements_attr(arr, f"{fn.name}_{cname}")
    op = arith_d.ConstantOp(t, attr)
    set_name(op, cname)
    return Tensor(op.result, fn)


def scalar(value, dtype: str) -> ir.Value:
    """Emit an ``arith.constant`` scalar of ``dtype`` (inside a region body or at top level)."""
    et = dtypes.to_ir_type(dtype)
    if dtypes.is_float(dtype):
        return arith_d.ConstantOp(et, ir.FloatAttr.get(et, float(value))).result
    return arith_d.ConstantOp(et, ir.IntegerAttr.get(et, int(value))).result


def as_tensor(op: str, arg: str, fn: FunctionBuilder, x, dtype: Optional[str] = None) -> Tensor:
    """Coerce an operand to a Tensor: numpy arrays become constants.

    Raises
    ------
    BuildError
        If ``x`` is not a Tensor or numpy array, or its dtype differs from ``dtype`` when given.
    """
    if isinstance(x, Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        if dtype is not None and dtypes.canonical_dtype(x.dtype) != dtype:
            x = x.astype(dtypes.to_numpy_dtype(dtype))
        t = constant(fn, x)
    else:
        raise BuildError(f"{op}: argument '{arg}' is {type(x).__name__}; expected a Tensor or numpy.ndarray")
    if dtype is not None and t.dtype != dtype:
        raise BuildError(f"{op}: argument '{arg}' has dtype {t.dtype}; expected {dtype} (use ops.cast)")
    return t


def empty(shape: Sequence[int], dtype: str) -> ir.Value:
    """Emit ``tensor.empty`` of a static shape."""
    return tensor_d.EmptyOp(list(shape), dtypes.to_ir_type(dtype)).result


def filled(shape: Sequence[int], dtype: str, value, name: str) -> ir.Value:
    """Emit ``tensor.empty`` + ``linalg.fill`` with ``value`` (named ``name``)."""
    init = empty(shape, dtype)
    v = linalg_d.fill(scalar(value, dtype), outs=[init])
    set_name(v.owner, name)
    return v


def broadcast_shapes(op: str, *shapes: Tuple[int, ...]) -> Tuple[int, ...]:
    """numpy broadcasting of shapes.

    Raises
    ------
    BuildError
        ``op: shapes (2, 3) and (4,) are not broadcastable (dimension -1: 3 vs 4)``.
    """
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(-rank, 0):
        dims = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(dims) > 1:
            raise BuildError(f"{op}: shapes {' and '.join(format_shape(s) for s in shapes)} are not "
                             f"broadcastable (dimension {i}: {' vs '.join(str(d) for d in sorted(dims))})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_map(in_shape: Sequence[int], out_shape: Sequence[int]) -> ir.AffineMap:
    """Indexing map reading an operand of ``in_shape`` broadcast (numpy rules) to ``out_shape``."""
    rank, r = len(out_shape), len(in_shape)
    exprs = []
    for i, d in enumerate(in_shape):
        o = rank - r + i
        if d == 1 and out_shape[o] != 1:
            exprs.append(ir.AffineConstantExpr.get(0))
        else:
            exprs.append(ir.AffineDimExpr.get(o))
    return ir.AffineMap.get(rank, 0, exprs)


def identity_map(rank: int) -> ir.AffineMap:
    """The identity map of ``rank`` dims."""
    return ir.AffineMap.get_identity(rank)


def generic(name: str, inputs: Sequence[ir.Value], in_maps: Sequence[ir.AffineMap],
            outputs: Sequence[ir.Value], out_maps: Sequence[ir.AffineMap],
            iterator_types: Sequence[str], body: Callable[..., Sequence[ir.Value]]) -> List[ir.Value]:
    """Emit a named ``linalg.generic``; ``body(*block_args)`` emits the scalar computation and
    returns the values to yield (one per output).

    ``iterator_types`` are ``"parallel"``/``"reduction"`` strings.
    """
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in list(in_maps) + list(out_maps)])
    its = linalg_d._IteratorTypeArrayAttr([getattr(linalg_d.IteratorType, it) for it in iterator_types],
                                          ir.Context.current)
    op = linalg_d.GenericOp([o.type for o in outputs], list(inputs), list(outputs), maps, its)
    elem_types = [ir.ShapedType(v.type).element_type for v in list(inputs) + list(outputs)]
    block = op.regions[0].blocks.append(*elem_types)
    with ir.InsertionPoint(block):
        ys = body(*block.arguments)
        linalg_d.YieldOp(list(ys))
    set_name(op, name)
    return list(op.results)


def normalize_axis(op: str, axis: int, ndim: int, arg: str = "axis") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative int.

    Raises
    ------
    BuildError
        If out of range.
    """
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < max(ndim, 1):
        raise BuildError(f"{op}: argument '{arg}' is {axis!r}; expected an int in [{-ndim}, {ndim})")
    return int(axis) % max(ndim, 1)


def operand_shape(op: str, arg: str, x, dtype: Optional[str] = None) -> Tuple[int, ...]:
    """Shape of an operand (Tensor or numpy array) checked before anything is emitted, so an op
    can validate every argument first and name its constants after its own name.

    Raises
    ------
    BuildError
        If ``x`` is neither a Tensor nor a numpy array, or is a Tensor whose dtype is not ``dtype``
        (numpy arrays are converted to ``dtype`` by :func:`operand`).
    """
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype != dtype:
            raise BuildError(f"{op}: argument '{arg}' has dtype {x.dtype}; expected {dtype} (use ops.cast)")
        return x.shape
    if isinstance(x, np.ndarray):
        return tuple(x.shape)
    raise BuildError(f"{op}: argument '{arg}' is {type(x).__name__}; expected a Tensor or numpy.ndarray")


def operand(op: str, arg: str, fn: FunctionBuilder, x, dtype: Optional[str], name: str) -> Tensor:
    """Like :func:`as_tensor`, but a numpy array becomes the constant ``name`` (an op's
    auxiliary name such as ``conv2d.weight``, claimed in the function).

    Raises
    ------
    BuildError
        As :func:`as_tensor`, or if ``name`` is already used in the function.
    """
    if isinstance(x, np.ndarray):
        if dtype is not None and dtypes.canonical_dtype(x.dtype) != dtype:
            x = x.astype(dtypes.to_numpy_dtype(dtype))
        x = constant(fn, x, name=fn.claim_op_name(name, op))
    return as_tensor(op, arg, fn, x, dtype)


def int_tuple(op: str, arg: str, value, n: Optional[int] = None, minimum: Optional[int] = None,
              scalar_ok: bool = True) -> Tuple[int, ...]:
    """``value`` (an int, repeated ``n`` times when ``scalar_ok``, or a sequence of ints) as a
    tuple of Python ints.

    Raises
    ------
    BuildError
        ``conv2d: argument 'strides' is (1, 2, 3); expected an int or 2 ints >= 1``.
    """
    what = (f"an int or {n} ints" if scalar_ok else f"{n} ints") if n is not None else "a sequence of ints"
    if minimum is not None:
        what += f" >= {minimum}"

    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

    if is_int(value) and scalar_ok and n is not None:
        out = (int(value),) * n
    else:
        try:
            items = list(value)
        except TypeError:
            raise BuildError(f"{op}: argument '{arg}' is {value!r}; expected {what}") from None
        if not all(is_int(v) for v in items) or (n is not None and len(items) != n):
            raise BuildError(f"{op}: argument '{arg}' is {value!r}; expected {what}")
        out = tuple(int(v) for v in items)
    if minimum is not None and any(v < minimum for v in out):
        raise BuildError(f"{op}: argument '{arg}' is {value!r}; expected {what}")
    return out
