"""Op-construction primitives shared by the sibling layers ``builder/`` and ``te/``.

Both emit ``linalg.generic`` ops named with ``mlc.name`` (the TensorIR block name), scalar
constants, ``tensor.empty`` and ``linalg.fill`` (and the pipeline's passes slices of mixed
static and dynamic extent); neither may import the other, so these
primitives live one layer down. They need an active context, location and insertion point.
Static shapes are checked here (:func:`check_shape`) before MLIR sees them: a dimension or an
element count that does not fit int64 aborts MLIR instead of raising.
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import numpy as np

from .._mlir import arith_d, ir, linalg_d, math_d, tensor_d
from ..errors import BuildError, format_shape
from . import dtypes
from .module import OP_NAME_ATTR
from .symbolic import SymDim

#: The largest element count (and dimension) of a static shape: MLIR's int64 sizes.
MAX_ELEMENTS = 2 ** 63 - 1


def index_constant(v: int) -> ir.Value:
    """``arith.constant v : index`` at the current insertion point."""
    return arith_d.ConstantOp(ir.IndexType.get(), v).result


def mixed_sizes(values: Sequence) -> Tuple[List[ir.Value], List[int]]:
    """``(dynamic, static)`` of a list of ints and index values (offsets or sizes): the index
    values in order, and every entry with ``?`` (MLIR's dynamic size) for each value, as
    ``tensor.extract_slice`` and its kin take them."""
    dynamic = [v for v in values if not isinstance(v, int)]
    static = [v if isinstance(v, int) else ir.ShapedType.get_dynamic_size() for v in values]
    return dynamic, static


def extract_slice(x: ir.Value, offsets: Sequence, sizes: Sequence) -> ir.Value:
    """``tensor.extract_slice`` of ``x`` at ``offsets`` of ``sizes`` (ints or index values),
    unit strides, not rank-reducing."""
    doff, soff = mixed_sizes(offsets)
    dsz, ssz = mixed_sizes(sizes)
    t = ir.RankedTensorType.get(ssz, ir.RankedTensorType(x.type).element_type)
    return tensor_d.ExtractSliceOp(t, x, doff, dsz, [], soff, ssz, [1] * len(sizes)).result


def insert_slice(part: ir.Value, x: ir.Value, offsets: Sequence, sizes: Sequence) -> ir.Value:
    """``tensor.insert_slice`` of ``part`` into ``x`` at ``offsets`` of ``sizes`` (ints or
    index values), unit strides."""
    doff, soff = mixed_sizes(offsets)
    dsz, ssz = mixed_sizes(sizes)
    return tensor_d.InsertSliceOp(part, x, doff, dsz, [], soff, ssz, [1] * len(sizes)).result


def i64_attr(v: int) -> ir.IntegerAttr:
    """``v : i64`` as an attribute (a tag, a count, an annotation's value)."""
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def check_shape(op: str, arg: str, shape) -> Tuple[int, ...]:
    """``shape`` as a tuple of Python ints, checked for MLIR.

    Parameters
    ----------
    op, arg : str
        Op and argument named in the error.
    shape : sequence of int or SymDim
        Python or numpy integers (not bools, not floats), each >= 0, whose product fits int64;
        symbolic sizes (:class:`~mlc_mlir.ir.symbolic.SymDim`) pass as they are.

    Raises
    ------
    BuildError
        ``arg: argument 'shape' is (2.7, 3); expected a sequence of ints``; negative dims; a
        dimension or element count over 2**63 - 1.
    """
    try:
        items = list(shape)
    except TypeError:
        raise BuildError(f"{op}: argument '{arg}' is {shape!r}; expected a sequence of ints") from None
    if not all(isinstance(d, SymDim) or isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
               for d in items):
        raise BuildError(f"{op}: argument '{arg}' is {tuple(items)!r}; expected a sequence of ints")
    out = tuple(d if isinstance(d, SymDim) else int(d) for d in items)
    static = [d for d in out if not isinstance(d, SymDim)]
    if any(d < 0 for d in static):
        raise BuildError(f"{op}: argument '{arg}' has negative dimensions: {format_shape(out)}")
    count = 1
    for d in static:
        count *= d
    if max(static, default=0) > MAX_ELEMENTS or count > MAX_ELEMENTS:
        raise BuildError(f"{op}: argument '{arg}' {format_shape(out)} has {count} elements; expected "
                         f"at most 2**63 - 1 (int64 sizes)")
    return out


def set_name(operation, name: str) -> None:
    """Attach ``mlc.name = name`` to an op (the TensorIR block name)."""
    operation = getattr(operation, "operation", operation)
    operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(name)


def ir_shape(shape) -> List[int]:
    """A shape of ints and SymDims as MLIR's list of sizes (a SymDim is the dynamic size ``?``)."""
    return [ir.ShapedType.get_dynamic_size() if isinstance(d, SymDim) else int(d) for d in shape]


def tensor_type(shape: Sequence[int], dtype: str, op: str = "tensor") -> ir.RankedTensorType:
    """``RankedTensorType`` of a shape (ints and SymDims, which become ``?``) and dtype name.

    Raises
    ------
    BuildError
        If the shape does not fit int64 (see :func:`check_shape`).
    """
    return ir.RankedTensorType.get(ir_shape(check_shape(op, "shape", shape)), dtypes.to_ir_type(dtype))


def scalar(value, dtype: str) -> ir.Value:
    """Emit an ``arith.constant`` scalar of ``dtype`` (inside a region body or at top level)."""
    et = dtypes.to_ir_type(dtype)
    if dtypes.is_float(dtype):
        return arith_d.ConstantOp(et, ir.FloatAttr.get(et, float(value))).result
    return arith_d.ConstantOp(et, ir.IntegerAttr.get(et, int(value))).result


def empty(shape: Sequence[int], dtype: str, op: str = "tensor.empty") -> ir.Value:
    """Emit ``tensor.empty`` of a shape (checked with :func:`check_shape`); each symbolic size
    is computed first (:meth:`~mlc_mlir.ir.symbolic.SymDim.materialize`: ``tensor.dim`` of the
    argument that defines it, ``arith`` for derived sizes) and passed as a dynamic size."""
    shape = check_shape(op, "shape", shape)
    sizes = [d.materialize() if isinstance(d, SymDim) else d for d in shape]
    return tensor_d.EmptyOp(sizes, dtypes.to_ir_type(dtype)).result


def filled(shape: Sequence[int], dtype: str, value, name: str) -> ir.Value:
    """Emit ``tensor.empty`` + ``linalg.fill`` with ``value`` (named ``name``)."""
    init = empty(shape, dtype, name)
    v = linalg_d.fill(scalar(value, dtype), outs=[init])
    set_name(v.owner, name)
    return v


def generic(name: str, inputs: Sequence[ir.Value], in_maps: Sequence[ir.AffineMap],
            outputs: Sequence[ir.Value], out_maps: Sequence[ir.AffineMap],
            iterator_types: Sequence[str], body: Callable[..., Sequence[ir.Value]]) -> List[ir.Value]:
    """Emit a ``linalg.generic`` named ``name``; ``body(*block_args)`` emits the scalar
    computation and returns the values to yield (one per output).

    ``iterator_types`` are ``"parallel"``/``"reduction"`` strings. Source: MLIR
    ``linalg.generic`` (indexing maps, iterator types, a region yielding the outputs).
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


def divide_int(a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
    """Integer ``a / b`` truncating toward zero (``arith.divsi``) that never traps: ``divsi`` is
    undefined (SIGFPE on x86) for ``b == 0`` and ``INT_MIN / -1``, so the divisor becomes 1 in
    both cases; ``x / 0`` then selects 0 and ``INT_MIN / -1`` gives ``INT_MIN`` (numpy's results)."""
    zero, one = scalar(0, dtype), scalar(1, dtype)
    int_min = int(np.iinfo(np.dtype(dtype)).min)
    b_zero = arith_d.cmpi(arith_d.CmpIPredicate.eq, b, zero)
    overflow = arith_d.andi(arith_d.cmpi(arith_d.CmpIPredicate.eq, a, scalar(int_min, dtype)),
                            arith_d.cmpi(arith_d.CmpIPredicate.eq, b, scalar(-1, dtype)))
    safe_b = arith_d.select(arith_d.ori(b_zero, overflow), one, b)
    return arith_d.select(b_zero, zero, arith_d.divsi(a, safe_b))


def like_type(t: ir.Type, elem: ir.Type) -> ir.Type:
    """``t`` (a scalar, vector or tensor type) with element type ``elem``."""
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(t.shape, elem)
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get(t.shape, elem)
    return elem


def splat_constant(t: ir.Type, value) -> ir.Value:
    """An ``arith.constant`` of type ``t``: a scalar, or a vector or tensor splat of ``value`` (float
    or integer elements, after the element type of ``t``)."""
    elem = t.element_type if isinstance(t, ir.ShapedType) else t
    attr = ir.FloatAttr.get(elem, float(value)) if isinstance(elem, ir.FloatType) \
        else ir.IntegerAttr.get(elem, int(value))
    if isinstance(t, ir.ShapedType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return arith_d.constant(t, attr)


def horner(x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
    """``c0 x^(n-1) + ... + c(n-1)`` by Horner's rule with ``math.fma`` (coefficients highest degree
    first; ``x`` a float scalar, vector or tensor)."""
    acc = splat_constant(x.type, coefficients[0])
    for c in coefficients[1:]:
        acc = math_d.fma(acc, x, splat_constant(x.type, c))
    return acc


def ordered_max(a: ir.Value, b: ir.Value) -> ir.Value:
    """``a > b ? a : b`` (``arith.cmpf ogt`` + ``arith.select``, float scalars or vectors): ``b``
    where either is NaN. The C expression that x86 ``maxps`` implements (one instruction), where
    ``arith.maximumf`` (NaN from either operand, -0 < +0) lowers to a compare-and-blend sequence
    of six; for callers that keep NaN by the operand order or do not depend on it."""
    return arith_d.select(arith_d.cmpf(arith_d.CmpFPredicate.OGT, a, b), a, b)
