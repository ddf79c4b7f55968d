"""Emission of linalg/tensor/arith ops for the op inventory: operand coercion, constants,
empty/fill, broadcasting indexing maps, ``linalg.generic`` construction, op naming, and the
``func.call`` / ``mlc.call_library`` call ops.

Every op of :mod:`mlc_mlir.ops` is written in terms of these, so each concern (how a numpy
array becomes a ``dense_resource`` constant, how numpy broadcasting becomes an affine map, how
an op gets its ``mlc.name``) lives in one place.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from .._mlir import arith_d, ir, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.constants import is_splat_view
from ..ir.emitters import check_shape, empty, filled, generic, ir_shape, scalar, set_name, tensor_type  # noqa: F401
from ..ir.symbolic import SymDim
from ..ir.module import OP_NAME_ATTR
from .tensor import FunctionLike, Tensor, current_function


Operand = object  # Tensor | numpy.ndarray | python scalar


def function_of(op: str, *args) -> FunctionLike:
    """The function of the Tensors among ``args`` (one function only); when no argument is a
    Tensor (numpy arrays only), the function open in ``with bb.function(...)``.

    Raises
    ------
    BuildError
        If no argument is a Tensor and no function is open, or Tensors come from different
        functions.
    """
    fns = {id(a.fn): a.fn for a in _flatten(args) if isinstance(a, Tensor)}
    if not fns:
        fn = current_function()
        if fn is None:
            raise BuildError(f"{op}: no argument is a Tensor and no function is open; call it inside "
                             "`with bb.function(...)`")
        fns = {id(fn): fn}
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


def op_name(fn: FunctionLike, op: str, name: Optional[str]) -> str:
    """The ``mlc.name`` for a new op: the user's ``name=`` or a unique default from ``op``
    (a :class:`Reserved` name is used as is)."""
    if isinstance(name, Reserved):
        return name
    return Reserved(fn.claim_op_name(name, op) if name is not None else fn.unique_op_name(op))






def constant(fn: FunctionLike, array: np.ndarray, name: Optional[str] = None) -> Tensor:
    """Emit ``arith.constant dense_resource<...>`` holding ``array`` (no copy through IR text).

    Raises
    ------
    BuildError
        If the array's dtype is unsupported.
    """
    dtype = dtypes.canonical_dtype(array.dtype)
    if is_splat_view(array):  # a broadcast view of one value: a splat attribute, never materialized
        arr = np.broadcast_to(np.asarray(array[(0,) * array.ndim], dtypes.to_numpy_dtype(dtype)), array.shape)
    else:  # ascontiguousarray turns a 0-d array into shape (1,): restore the shape
        arr = np.ascontiguousarray(array, dtype=dtypes.to_numpy_dtype(dtype)).reshape(array.shape)
    t = tensor_type(arr.shape, dtype, "constant")
    cname = name if isinstance(name, Reserved) else (
        fn.claim_op_name(name, "constant") if name is not None else fn.unique_op_name("constant"))
    attr = fn.builder._constants.constant(arr, f"{fn.name}_{cname}")
    op = arith_d.ConstantOp(t, attr)
    set_name(op, cname)
    return Tensor(op.result, fn)




def constant_op(array, name: Optional[str] = None) -> Tensor:
    """A numpy array as a constant Tensor of the function being built (``ops.constant``):
    ``arith.constant dense_resource<...>`` named ``name`` (default ``constant``, ``constant_1``...),
    no copy through IR text. Relax's ``R.const``.

    Parameters
    ----------
    array : numpy.ndarray or numpy scalar, any shape (0-d stays 0-d)
        dtype in :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`.
    name : str, optional
        The op's ``mlc.name``.

    Returns
    -------
    Tensor of ``array``'s shape and dtype.

    Raises
    ------
    BuildError
        If ``array`` is not a numpy array, its dtype is unsupported, no function is open
        (``with bb.function(...)``), or ``name`` is taken.
    """
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise BuildError(f"constant: argument 'array' is {type(array).__name__}; expected numpy.ndarray")
    return constant(function_of("constant", array), array, name)


def tensor_arg(op: str, arg: str, x) -> Tensor:
    """An op's tensor argument: a Tensor as is, a numpy array as a constant of the current
    function (so every op accepts numpy arrays wherever it accepts Tensors).

    Raises
    ------
    BuildError
        If ``x`` is neither, or no function is open for a numpy array.
    """
    if isinstance(x, Tensor):
        function_of(op, x)
        return x
    if isinstance(x, np.ndarray):
        return constant(function_of(op, x), x)
    raise BuildError(f"{op}: argument '{arg}' is {type(x).__name__}; expected a Tensor or numpy.ndarray")


def common_dtype(op: str, *xs) -> str:
    """dtype of the first Tensor among ``xs``, else of the first numpy array (the dtype the
    other operands are converted to).

    Raises
    ------
    BuildError
        If there is neither.
    """
    for x in _flatten(xs):
        if isinstance(x, Tensor):
            return x.dtype
    for x in _flatten(xs):
        if isinstance(x, np.ndarray):
            return dtypes.canonical_dtype(x.dtype)
    raise BuildError(f"{op}: no argument is a Tensor or numpy.ndarray")


def converted(op: str, arg: str, x: np.ndarray, dtype: str) -> np.ndarray:
    """The numpy array ``x`` in ``dtype`` (``x`` itself when it has it already).

    Raises
    ------
    BuildError
        If ``x``'s own dtype is not supported (object, strings...): converting would turn a
        ``None`` into NaN, or fail on a string, instead of refusing the input.
    """
    try:
        own = dtypes.canonical_dtype(x.dtype)
    except BuildError as e:
        raise BuildError(f"{op}: argument '{arg}' is a numpy array of {e}") from None
    return x if own == dtype else x.astype(dtypes.to_numpy_dtype(dtype))


def as_tensor(op: str, arg: str, fn: FunctionLike, x, dtype: Optional[str] = None) -> Tensor:
    """Coerce an operand to a Tensor: numpy arrays become constants.

    Raises
    ------
    BuildError
        If ``x`` is not a Tensor or numpy array, or its dtype differs from ``dtype`` when given.
    """
    if isinstance(x, Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        if dtype is not None:
            x = converted(op, arg, x, dtype)
        t = constant(fn, x)
    else:
        raise BuildError(f"{op}: argument '{arg}' is {type(x).__name__}; expected a Tensor or numpy.ndarray")
    if dtype is not None and t.dtype != dtype:
        raise BuildError(f"{op}: argument '{arg}' has dtype {t.dtype}; expected {dtype} (use ops.cast)")
    return t






def broadcast_shapes(op: str, *shapes: Tuple[int, ...]) -> Tuple[int, ...]:
    """numpy broadcasting of shapes (ints and symbolic sizes).

    A symbolic size broadcasts against 1 and against itself only: the decision is made at build
    time, so ``seq`` vs ``7`` and ``seq`` vs ``batch`` are errors even though the sizes may agree
    at run time (name one size once, or give the static size); a symbolic size that is 1 at run
    time is not broadcast.

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
            names = sorted(str(d) for d in dims)
            why = "" if all(not isinstance(d, SymDim) for d in dims) else (
                "; symbolic sizes broadcast only against 1 or the same size: use one name for "
                "equal sizes")
            raise BuildError(f"{op}: shapes {' and '.join(format_shape(s) for s in shapes)} are not "
                             f"broadcastable (dimension {i}: {' vs '.join(names)}){why}")
        out.append(dims.pop() if dims else 1)
    return check_shape(op, "result shape", out)


def prod(dims) -> object:
    """The product of dims (ints and SymDims): an int, or a SymDim when a dim is symbolic."""
    out = 1
    for d in dims:
        out = out * d
    return out


def mixed(dims) -> Tuple[list, list]:
    """Sizes or offsets of a ``tensor`` op in MLIR's mixed form: ``(values, static)``, each
    SymDim emitted as an ``index`` value (listed in ``values``, ``?`` in ``static``)."""
    values, static = [], []
    for d in dims:
        if isinstance(d, SymDim):
            values.append(d.materialize())
            static.append(ir.ShapedType.get_dynamic_size())
        else:
            static.append(int(d))
    return values, static


def size_tensor(fn: FunctionLike, d: SymDim, dtype: str) -> Tensor:
    """A 0-d Tensor of float ``dtype`` holding the symbolic size ``d`` (``arith.index_cast``,
    ``arith.sitofp``, ``tensor.from_elements``): how an op uses a run-time size as a value
    (e.g. the divisor of a mean over a dynamic axis)."""
    i64 = ir.IntegerType.get_signless(64)
    v = arith_d.sitofp(dtypes.to_ir_type(dtype), arith_d.index_cast(i64, d.materialize()))
    return Tensor(tensor_d.from_elements(tensor_type((), dtype), [v]), fn)


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


def operand(op: str, arg: str, fn: FunctionLike, x, dtype: Optional[str], name: str) -> Tensor:
    """Like :func:`as_tensor`, but a numpy array becomes the constant ``name`` (an op's
    auxiliary name such as ``conv2d.weight``, claimed in the function).

    Raises
    ------
    BuildError
        As :func:`as_tensor`, or if ``name`` is already used in the function.
    """
    if isinstance(x, np.ndarray):
        if dtype is not None:
            x = converted(op, arg, x, dtype)
        x = constant(fn, x, name=Reserved(fn.claim_op_name(name, op)))
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


#: Operand segments of ``mlc.call_library`` (dialects/mlc.irdl.mlir): in0..in5, init.
CALL_LIBRARY_SEGMENTS = 7


def call_library(callee: str, inputs: Sequence[ir.Value], init: ir.Value, name: str) -> ir.Operation:
    """Emit ``%r = "mlc.call_library"(inputs..., init) {callee, operandSegmentSizes, mlc.name}``
    at the current insertion point: a destination-passing call of a registered kernel
    (Relax's ``call_dps_packed``; lowered by ``graph.LowerCallLibrary``). The result has
    ``init``'s type.

    Parameters
    ----------
    callee : str
        A name registered with ``mlc.register_func`` or a native provider (``openblas.sgemm``).
    inputs : sequence of ir.Value
        At most 6 values (tensors of any types).
    init : ir.Value
        The destination tensor (usually ``tensor.empty``).
    name : str
        The op's ``mlc.name``.

    Raises
    ------
    BuildError
        For more than 6 inputs.
    """
    if len(inputs) > CALL_LIBRARY_SEGMENTS - 1:
        raise BuildError(f"call_library: '{callee}' gets {len(inputs)} inputs; mlc.call_library takes at "
                         f"most {CALL_LIBRARY_SEGMENTS - 1}")
    segs = [1] * len(inputs) + [0] * (CALL_LIBRARY_SEGMENTS - 1 - len(inputs)) + [1]
    return ir.Operation.create(
        "mlc.call_library", results=[init.type], operands=list(inputs) + [init],
        attributes={"callee": ir.StringAttr.get(callee),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get(segs),
                    OP_NAME_ATTR: ir.StringAttr.get(name)})


def copy(x: Tensor, name: str) -> Tensor:
    """Emit an identity ``linalg.generic`` (``name``) copying ``x`` into a fresh tensor: a new
    SSA value with the same contents (used when a function returns one tensor twice)."""
    rank = x.ndim
    init = empty(x.shape, x.dtype)
    res = generic(name, [x.value], [identity_map(rank)], [init], [identity_map(rank)],
                  ["parallel"] * rank, lambda a, _out: [a])
    return Tensor(res[0], x.fn)
