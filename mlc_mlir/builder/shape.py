"""Shape ops (TOPI's ``transform`` category): reshape, transpose/permute, flatten, concat, slice,
pad, broadcast_to, emitted as ``tensor`` ops (``collapse_shape``/``expand_shape``,
``insert_slice``/``extract_slice``, ``tensor.pad``), ``linalg.transpose`` or a ``linalg.generic``
copy. Semantics follow numpy (``reshape``, ``transpose``, ``concatenate``, basic slicing,
``pad``, ``broadcast_to``) and torch (``flatten``, ``permute``). reshape, concat, slice,
transpose and flatten take symbolic sizes (:class:`~mlc_mlir.ir.symbolic.SymDim`) too.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from . import linalg_emit as emit
from ..ir.symbolic import SymDim, is_static
from .tensor import Tensor

_py_slice = slice  # the builtin, before ops.slice shadows the name in this module


def _tensor(op: str, x) -> Tensor:
    return emit.tensor_arg(op, "x", x)


def _shape_arg(op: str, arg: str, shape, allow_minus_one: bool = False) -> List[int]:
    """A shape argument as a list of ints and SymDims (symbolic sizes pass as they are)."""
    if isinstance(shape, (int, np.integer, SymDim)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        items = list(shape)
    except TypeError:
        items = None
    if items is not None and any(isinstance(d, SymDim) for d in items):
        ints = emit.int_tuple(op, arg, [d for d in items if not isinstance(d, SymDim)])
        it = iter(ints)
        out = [d if isinstance(d, SymDim) else next(it) for d in items]
    else:
        out = list(emit.int_tuple(op, arg, shape))
    static = [d for d in out if not isinstance(d, SymDim)]
    if any(d < (-1 if allow_minus_one else 0) for d in static) or (allow_minus_one and static.count(-1) > 1):
        raise BuildError(f"{op}: argument '{arg}' is {tuple(out)}; expected dims >= 0"
                         + (" and at most one -1" if allow_minus_one else ""))
    return out


def reshape(x, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """numpy ``reshape`` (row-major; one dim may be -1), TOPI ``reshape``.

    Emits nothing when the shape is unchanged; one ``tensor.collapse_shape`` or
    ``tensor.expand_shape`` (``name``) when the dims of one shape are products of consecutive
    dims of the other (``(2, 3, 4) -> (6, 4)``, ``(6,) -> (1, 2, 3)``, to or from rank 0);
    otherwise a collapse to 1-D (``<name>.collapse``) then an expand (``name``).

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    shape : int or sequence of int or SymDim
        The new shape, same element count; one dim may be -1 (inferred). Symbolic sizes
        (``f.dim("n") * 8``) are allowed where the element counts are provably equal.

    Returns
    -------
    Tensor of ``shape``, x's dtype.

    Raises
    ------
    BuildError
        ``reshape: cannot reshape (2, 3) into (4, 2)`` (element counts differ), or more than
        one -1 / other negative dims.
    """
    op = "reshape"
    x = _tensor(op, x)
    shape = _shape_arg(op, "shape", shape, allow_minus_one=True)
    size = emit.prod(x.shape)
    if any(isinstance(d, int) and d == -1 for d in shape):
        shape[shape.index(-1)] = _inferred_dim(op, x.shape, shape)
    if emit.prod(shape) != size:
        raise BuildError(f"{op}: cannot reshape {format_shape(x.shape)} into {format_shape(shape)}"
                         + ("" if isinstance(size, int) else " (element counts not provably equal)"))
    if tuple(shape) == x.shape:
        return x
    fn = x.fn
    nm = emit.op_name(fn, op, name)
    et = x.type.element_type
    out_t = ir.RankedTensorType.get(emit.ir_shape(shape), et)
    groups = _reassociation(x.shape, tuple(shape))
    expand_groups = [list(range(len(shape)))] if groups is None else groups if len(shape) > x.ndim else []
    if any(sum(isinstance(shape[i], SymDim) for i in g) > 1 for g in expand_groups):
        # expand_shape splitting one dim into several symbolic ones (batch*seq -> batch, seq) has
        # no memref lowering (expand-strided-metadata takes one dynamic size per group)
        idx = ir.IndexType.get()
        dims = [d.materialize() if isinstance(d, SymDim) else arith_d.ConstantOp(idx, int(d)).result
                for d in shape]
        shape_t = tensor_d.from_elements(ir.RankedTensorType.get([len(shape)], idx), dims)
        r = tensor_d.reshape(out_t, x.value, shape_t)
        emit.set_name(r.owner, nm)
        return Tensor(r, fn)
    if groups is not None:     # one collapse_shape (fewer dims) or expand_shape (more dims)
        r = (tensor_d.CollapseShapeOp(out_t, x.value, groups) if len(shape) < x.ndim
             else tensor_d.ExpandShapeOp(out_t, x.value, groups, *emit.mixed(shape))).result
        emit.set_name(r.owner, nm)
        return Tensor(r, fn)
    flat_t = ir.RankedTensorType.get(emit.ir_shape([size]), et)
    flat = tensor_d.CollapseShapeOp(flat_t, x.value, [list(range(x.ndim))]).result
    emit.set_name(flat.owner, f"{nm}.collapse")
    r = tensor_d.ExpandShapeOp(out_t, flat, [list(range(len(shape)))], *emit.mixed(shape)).result
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def _inferred_dim(op: str, src: tuple, shape: list):
    """The size of the ``-1`` in ``shape`` for a tensor of shape ``src``: the element count of
    ``src`` over the other dims of ``shape``, where each symbolic dim of ``shape`` cancels an equal
    dim of ``src`` (``(1, seq) -> (-1, seq)`` infers 1).

    Raises
    ------
    BuildError
        If the division is not exact or a symbolic dim of ``shape`` cancels no dim of ``src``.
    """
    left = list(src)
    rest = 1
    for d in shape:
        if isinstance(d, SymDim):
            if d not in left:
                raise BuildError(f"{op}: cannot reshape {format_shape(src)} into {format_shape(shape)}; "
                                 "give the symbolic sizes instead of -1")
            left.remove(d)
        elif d != -1:
            rest *= d
    size = emit.prod(left)
    if rest == 0 or (isinstance(size, int) and size % rest):
        raise BuildError(f"{op}: cannot reshape {format_shape(src)} into {format_shape(shape)}")
    return size // rest


def _reassociation(src: tuple, dst: tuple) -> Optional[List[List[int]]]:
    """The reassociation of a single ``collapse_shape``/``expand_shape`` between ``src`` and
    ``dst``: for each dim of the shorter shape, the group of consecutive dims of the longer one
    whose product it is (``(2, 3, 4) -> (6, 4)``: ``[[0, 1], [2]]``); None when the ranks are
    equal or no such grouping exists (``(2, 3) -> (3, 2)``). Trailing unit dims of the longer
    shape join the last group; to or from rank 0 the reassociation is empty."""
    long, short = (src, dst) if len(src) > len(dst) else (dst, src)
    if len(long) == len(short):
        return None
    if not short:
        return []
    groups, i = [], 0
    symbolic = not (is_static(long) and is_static(short))
    for d in short:
        if i == len(long):
            return None
        g, p = [i], long[i]
        i += 1
        while (p != d if symbolic else p < d) and i < len(long):
            p *= long[i]
            g.append(i)
            i += 1
        if p != d:
            return None
        groups.append(g)
    while i < len(long) and long[i] == 1:
        groups[-1].append(i)
        i += 1
    return groups if i == len(long) else None


def transpose(x, perm: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """numpy ``transpose`` / TOPI ``transpose``: ``y.shape[i] = x.shape[perm[i]]``, emitted as
    ``linalg.transpose`` (``name``) into a ``tensor.empty``.

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    perm : sequence of int, optional
        A permutation of ``range(x.ndim)`` (negative entries count from the end); default: the
        reversed axes.

    Returns
    -------
    Tensor of shape ``[x.shape[p] for p in perm]``, x's dtype; x itself for the identity
    permutation (nothing is emitted, as numpy returns a view).

    Raises
    ------
    BuildError
        If ``perm`` is not a permutation of ``range(x.ndim)``.
    """
    op = "transpose"
    x = _tensor(op, x)
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    else:
        given = emit.int_tuple(op, "perm", perm)
        perm = [p + x.ndim if p < 0 else p for p in given]
        if sorted(perm) != list(range(x.ndim)):
            raise BuildError(f"{op}: argument 'perm' is {tuple(given)}; expected a permutation of "
                             f"range({x.ndim}) for x {format_shape(x.shape)}")
    if perm == sorted(perm):  # the identity (incl. 0-d and 1-D x): nothing to emit
        return x
    fn = x.fn
    nm = emit.op_name(fn, op, name)
    init = emit.empty([x.shape[p] for p in perm], x.dtype)
    r = linalg_d.transpose(x.value, outs=[init], permutation=perm)  # the op (it has no region)
    emit.set_name(r, nm)
    return Tensor(r.results[0], fn)


def permute(x, dims: Sequence[int], name: Optional[str] = None) -> Tensor:
    """torch ``permute``: :func:`transpose` with a required permutation ``dims``
    (``linalg.transpose`` named ``name``, default ``transpose``).

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    dims : sequence of int
        A permutation of ``range(x.ndim)``.

    Returns
    -------
    Tensor of shape ``[x.shape[d] for d in dims]``.

    Raises
    ------
    BuildError
        If ``dims`` is not a permutation of ``range(x.ndim)``.
    """
    if dims is None:
        raise BuildError("permute: argument 'dims' is None; expected a permutation (use ops.transpose "
                         "to reverse the axes)")
    return transpose(x, dims, name=name)


def flatten(x, start_dim: int = 0, end_dim: int = -1, name: Optional[str] = None) -> Tensor:
    """torch ``flatten``: merge dims ``start_dim..end_dim`` (inclusive) into one, emitted by
    :func:`reshape` (one ``tensor.collapse_shape``, ``name``). A 0-d x becomes (1,).

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    start_dim, end_dim : int
        In ``[-x.ndim, x.ndim)``, ``start_dim <= end_dim`` once normalized.

    Returns
    -------
    Tensor of shape ``x.shape[:s] + (prod(x.shape[s:e+1]),) + x.shape[e+1:]``.

    Raises
    ------
    BuildError
        If a dim is out of range or ``start_dim`` comes after ``end_dim``.
    """
    op = "flatten"
    x = _tensor(op, x)
    if x.ndim == 0:
        for arg, d in (("start_dim", start_dim), ("end_dim", end_dim)):
            if d not in (0, -1):
                raise BuildError(f"{op}: argument '{arg}' is {d!r}; expected 0 or -1 for a 0-d tensor")
        return reshape(x, (1,), name=emit.op_name(x.fn, op, name))
    s = emit.normalize_axis(op, start_dim, x.ndim, "start_dim")
    e = emit.normalize_axis(op, end_dim, x.ndim, "end_dim")
    if s > e:
        raise BuildError(f"{op}: start_dim {start_dim} comes after end_dim {end_dim} for x {format_shape(x.shape)}")
    shape = list(x.shape[:s]) + [int(np.prod(x.shape[s:e + 1]))] + list(x.shape[e + 1:])
    if tuple(shape) == x.shape:
        return x
    return reshape(x, shape, name=emit.op_name(x.fn, op, name))


def concat(tensors: Sequence, axis: int = 0, name: Optional[str] = None) -> Tensor:
    """numpy ``concatenate`` / TOPI ``concatenate``: a ``tensor.empty`` of the result and one
    ``tensor.insert_slice`` per input at its offset along ``axis`` (``<name>.part0``, ...; the
    last is ``name``).

    Parameters
    ----------
    tensors : list of Tensor or numpy.ndarray
        At least one Tensor; all of the same rank (>= 1), dtype (numpy arrays are converted to
        the first Tensor's dtype and become constants ``<name>.input<i>``) and shape except along
        ``axis``.
    axis : int

    Returns
    -------
    Tensor, the inputs' shape with ``sum(t.shape[axis])`` along ``axis``.

    Raises
    ------
    BuildError
        For an empty list, 0-d inputs, or ranks, dtypes or non-axis dims that differ (naming the
        input: ``concat: argument 'tensors[1]' has shape (2, 3, 5); expected (2, 3, 4) except
        along axis 0``).
    """
    op = "concat"
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise BuildError(f"{op}: argument 'tensors' is {tensors!r}; expected a non-empty list of Tensors")
    fn = emit.function_of(op, *tensors)
    dtype = emit.common_dtype(op, *tensors)
    shapes = [emit.operand_shape(op, f"tensors[{i}]", t, dtype) for i, t in enumerate(tensors)]
    ref = shapes[0]
    if not ref:
        raise BuildError(f"{op}: argument 'tensors[0]' is 0-d; expected tensors of rank >= 1")
    ax = emit.normalize_axis(op, axis, len(ref))
    for i, s in enumerate(shapes):
        if len(s) != len(ref) or any(a != b for d, (a, b) in enumerate(zip(s, ref)) if d != ax):
            raise BuildError(f"{op}: argument 'tensors[{i}]' has shape {format_shape(s)}; expected "
                             f"{format_shape(ref)} except along axis {ax}")
    nm = emit.op_name(fn, op, name)
    ts = [emit.operand(op, f"tensors[{i}]", fn, t, dtype, f"{nm}.input{i}") for i, t in enumerate(tensors)]
    out_shape = list(ref)
    out_shape[ax] = sum(s[ax] for s in shapes)
    acc = emit.empty(out_shape, dtype)
    if 0 in out_shape:  # nothing to insert (a slice at offset 0 of an empty dim does not verify)
        return Tensor(acc, fn)
    ts = [t for t in ts if t.shape[ax]]  # inputs empty along the axis add nothing
    off = 0
    for i, t in enumerate(ts):
        offsets = [0] * len(ref)
        offsets[ax] = off
        (dyn_off, st_off), (dyn_sz, st_sz) = emit.mixed(offsets), emit.mixed(t.shape)
        acc = tensor_d.InsertSliceOp(t.value, acc, dyn_off, dyn_sz, [], st_off, st_sz, [1] * len(ref)).result
        emit.set_name(acc.owner, nm if i == len(ts) - 1 else f"{nm}.part{i}")
        off += t.shape[ax]
    return Tensor(acc, fn)


def slice(x, begin: Sequence[Optional[int]], end: Sequence[Optional[int]],  # noqa: A001
          strides: Optional[Sequence[Optional[int]]] = None, axes: Optional[Sequence[int]] = None,
          name: Optional[str] = None) -> Tensor:
    """Strided slice ``x[b0:e0:s0, b1:e1:s1, ...]`` (numpy basic slicing, TOPI
    ``strided_slice``), emitted as one ``tensor.extract_slice`` (``name``).

    Indices follow Python: negative ``begin``/``end`` count from the end, out-of-range bounds
    clamp, None means the whole extent.

    Parameters
    ----------
    x : Tensor, rank >= 1, any dtype
    begin, end : sequence of int or None
        One entry per sliced axis.
    strides : sequence of int, optional
        Positive; default 1.
    axes : sequence of int, optional
        The axes ``begin``/``end``/``strides`` refer to (default: the leading ``len(begin)``
        axes); the other axes are kept whole.

    Returns
    -------
    Tensor; along a sliced axis ``len(range(*slice(b, e, s).indices(n)))`` elements (0 for
    an empty selection, as numpy).

    Raises
    ------
    BuildError
        For zero or negative strides, lengths that differ, more entries than axes, or a repeated
        axis.
    """
    op = "slice"
    x = _tensor(op, x)
    try:
        begin, end = list(begin), list(end)
    except TypeError:
        raise BuildError(f"{op}: arguments 'begin' and 'end' must be sequences, got {begin!r}, {end!r}") from None
    if axes is None:
        if len(begin) > x.ndim:
            raise BuildError(f"{op}: argument 'begin' has {len(begin)} entries; expected at most {x.ndim} for x "
                             f"{format_shape(x.shape)}")
        axes = list(range(len(begin)))
    else:
        axes = [emit.normalize_axis(op, a, x.ndim, "axes") for a in emit.int_tuple(op, "axes", axes)]
        if len(set(axes)) != len(axes):
            raise BuildError(f"{op}: argument 'axes' {tuple(axes)} repeats an axis")
    strides = [1] * len(axes) if strides is None else list(strides)
    if not (len(begin) == len(end) == len(strides) == len(axes)):
        raise BuildError(f"{op}: begin, end, strides and axes must have equal lengths, got "
                         f"{len(begin)}, {len(end)}, {len(strides)}, {len(axes)}")
    offs, sizes, steps = [0] * x.ndim, list(x.shape), [1] * x.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        for arg, v in (("begin", b), ("end", e), ("strides", s)):
            if arg != "strides" and isinstance(v, SymDim) and isinstance(x.shape[a], SymDim):
                continue  # a symbolic bound on a symbolic axis: clamped below
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)):
                raise BuildError(f"{op}: argument '{arg}' has {v!r} for axis {a}; expected an int or None")
        s = 1 if s is None else int(s)
        if s <= 0:
            raise BuildError(f"{op}: argument 'strides' has {s} for axis {a}; expected a positive stride "
                             "(negative strides are not supported)")
        if isinstance(x.shape[a], SymDim):
            start, n, step = _symbolic_slice(op, x, a, b, e, s)
        else:
            start, stop, step = _py_slice(b, e, s).indices(x.shape[a])
            n = len(range(start, stop, step))
        empty = isinstance(n, int) and n == 0
        offs[a], sizes[a], steps[a] = (0, 0, 1) if empty else (start, n, step)
    fn = x.fn
    nm = emit.op_name(fn, op, name)
    if any(isinstance(z, int) and z == 0 for z in sizes):  # numpy's empty slice: nothing to read
        return Tensor(emit.empty(sizes, x.dtype), fn)
    t = ir.RankedTensorType.get(emit.ir_shape(sizes), x.type.element_type)
    (dyn_off, st_off), (dyn_sz, st_sz) = emit.mixed(offs), emit.mixed(sizes)
    r = tensor_d.ExtractSliceOp(t, x.value, dyn_off, dyn_sz, [], st_off, st_sz, steps).result
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def _symbolic_slice(op: str, x: Tensor, a: int, b, e, s: int):
    """``(start, size, step)`` of ``b:e:s`` (``s > 0``) along the symbolic axis ``a`` of ``x``
    (size ``n``), with Python's / ONNX ``Slice``'s rules: a negative bound counts from the end
    (``n + b``), then each bound is clamped to ``0 .. n``, and the size is
    ``max(0, ceil((stop - start) / s))``. ``b`` and ``e`` are None (``0``, ``n``), ints or
    symbolic sizes of known sign (``seq + 1``; a symbolic bound whose sign the dims' bounds do
    not decide is an error). Clamps the declared bounds of the dims decide disappear
    (:meth:`~mlc_mlir.builder.symbols.SymbolScope.minimum`); the others stay in the sizes as
    ``min``/``max`` atoms (``x[-4095:]`` of ``past`` rows: start ``max(past - 4095, 0)``, size
    ``min(past, 4095)``), emitted as ``arith.minsi``/``maxsi``.

    Raises
    ------
    BuildError
        For a symbolic bound whose sign the bounds of the dims do not decide.
    """
    n, sc = x.shape[a], x.fn.symbols

    def bound(v, default, arg):
        if v is None:
            return default
        lo, hi = sc.lower_bound(v), sc.upper_bound(v)
        if lo is not None and lo >= 0:
            return sc.minimum(v, n)
        if hi is not None and hi < 0:
            return sc.maximum(n + v, 0)
        raise BuildError(f"{op}: axis {a} of x {format_shape(x.shape)}: argument '{arg}' is {v}, whose "
                         "sign the bounds of its dims do not decide; declare them (f.dim(name, min=...))")

    start, stop = bound(b, 0, "begin"), bound(e, n, "end")
    size = sc.maximum(stop - start if s == 1 else (stop - start + s - 1) // s, 0)
    return start, size, s


def pad(x, pad_width, constant_value=0, name: Optional[str] = None) -> Tensor:
    """numpy ``pad(mode="constant")`` / TOPI ``nn.pad``, emitted as ``tensor.pad`` (``name``)
    whose region yields ``constant_value``.

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    pad_width : int, (before, after), ((before, after),) or one (before, after) per axis
        numpy's forms; widths >= 0.
    constant_value : int or float
        Converted to x's dtype.

    Returns
    -------
    Tensor of shape ``x.shape[i] + before_i + after_i``; x itself when every width is 0.

    Raises
    ------
    BuildError
        For non-integer or negative widths, or a ``pad_width`` that does not give (before, after)
        for every axis.
    """
    op = "pad"
    x = _tensor(op, x)
    try:
        pw = np.asarray(pad_width)
    except ValueError:
        pw = None
    if pw is None or pw.dtype.kind not in "iu":
        raise BuildError(f"{op}: argument 'pad_width' is {pad_width!r}; expected ints")
    try:
        pw = np.broadcast_to(pw.reshape(-1, 2) if pw.ndim == 1 and pw.size == 2 else pw, (x.ndim, 2))
    except ValueError:
        raise BuildError(f"{op}: argument 'pad_width' is {pad_width!r}; expected (before, after) for each of "
                         f"the {x.ndim} axes of x {format_shape(x.shape)}") from None
    if (pw < 0).any():
        raise BuildError(f"{op}: argument 'pad_width' is {pad_width!r}; expected widths >= 0")
    if not isinstance(constant_value, (int, float, np.integer, np.floating)) or isinstance(constant_value, bool):
        raise BuildError(f"{op}: argument 'constant_value' is {constant_value!r}; expected an int or float")
    if not pw.any():
        return x
    fn = x.fn
    nm = emit.op_name(fn, op, name)
    return Tensor(pad_value(x.value, [int(a) for a in pw[:, 0]], [int(b) for b in pw[:, 1]], constant_value,
                            x.dtype, nm), fn)


def pad_value(v: ir.Value, low: Sequence[int], high: Sequence[int], value, dtype: str, name: str) -> ir.Value:
    """Emit ``tensor.pad`` (named ``name``) of ``v`` by ``low``/``high`` per dim, yielding the
    scalar ``value`` of ``dtype``."""
    t = ir.RankedTensorType(v.type)
    out = ir.RankedTensorType.get([d + a + b for d, a, b in zip(t.shape, low, high)], t.element_type)
    op = tensor_d.PadOp(out, v, [], [], list(low), list(high))
    block = op.regions[0].blocks.append(*([ir.IndexType.get()] * t.rank))
    with ir.InsertionPoint(block):
        tensor_d.YieldOp(emit.scalar(value, dtype))
    emit.set_name(op, name)
    return op.result


def broadcast_to(x, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """numpy ``broadcast_to`` / TOPI ``broadcast_to``: a ``linalg.generic`` copy (``name``)
    reading x through a broadcast indexing map (size-1 dims read index 0; missing leading dims
    are not read).

    Parameters
    ----------
    x : Tensor, any shape, any dtype
    shape : int or sequence of int
        The target; ``len(shape) >= x.ndim`` and each of x's dims is 1 or equal to the matching
        trailing target dim.

    Returns
    -------
    Tensor of ``shape``, x's dtype (a copy, not a view).

    Raises
    ------
    BuildError
        ``broadcast_to: cannot broadcast (2, 3) to (4, 3) (dimension -2: 2 vs 4)``, or negative
        dims.
    """
    op = "broadcast_to"
    x = _tensor(op, x)
    shape = tuple(_shape_arg(op, "shape", shape))
    bad = len(shape) < x.ndim or any(d != 1 and d != s for d, s in zip(x.shape[::-1], shape[::-1]))
    if bad:
        why = ("x has more dims than the target" if len(shape) < x.ndim else
               next(f"dimension {-i - 1}: {d} vs {s}" for i, (d, s) in enumerate(zip(x.shape[::-1], shape[::-1]))
                    if d != 1 and d != s))
        raise BuildError(f"{op}: cannot broadcast {format_shape(x.shape)} to {format_shape(shape)} ({why})")
    fn = x.fn
    nm = emit.op_name(fn, op, name)
    res = emit.generic(nm, [x.value], [emit.broadcast_map(x.shape, shape)], [emit.empty(shape, x.dtype)],
                       [emit.identity_map(len(shape))], ["parallel"] * len(shape), lambda a, o: [a])
    return Tensor(res[0], fn)
