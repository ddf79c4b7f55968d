"""``te.placeholder`` / ``te.compute``: tensor expressions emitted as one ``linalg.generic`` each.

Source: TVM ``te.compute`` / ``te.placeholder`` / ``te.create_prim_func``. A compute's loop
variables are the output's axes (``parallel`` iterators) followed by its reduce axes
(``reduction`` iterators); every ``A[idx...]`` becomes an input of the generic read through the
affine map of its indices; the body becomes the generic's region; a ``te.sum/max/min`` body
accumulates into a ``linalg.fill``-ed init named ``<name>.init``. The generic carries
``mlc.name = name``, so ``Schedule(mod).get_block(name)`` finds it like any builder op.

Composition with the graph builder (``te`` and ``builder`` are sibling layers: ``te`` imports
neither ``builder`` nor its Tensor class, it uses the function it is given):

* eager: inside ``with bb.function(...) as f``, a compute whose body indexes builder Tensors
  only (``A[i, k]`` with ``A = f.arg(...)`` or any op result) is emitted at once and returns a
  builder Tensor, usable by every op;
* lazy (TVM style): computes over ``te.placeholder`` tensors are descriptions until
  ``te.emit(f, C, binds={A: x})`` (unbound placeholders become ``f.arg``) or
  ``te.create_function(bb, "main", [A, B, C])`` (TVM ``create_prim_func``).
"""

from __future__ import annotations

import inspect
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .._mlir import arith_d, ir, linalg_d, math_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.emitters import check_shape, divide_int, empty, filled, generic, scalar
from . import expr as E


class _Indexable:
    """``T[i, j]`` and ``T(i, j)`` build an element access."""

    shape: tuple
    dtype: str
    name: str

    def __getitem__(self, indices):
        idx = indices if isinstance(indices, tuple) else (indices,)
        return E.Access(self, tuple(E.as_index(i, "index") for i in idx))

    def __call__(self, *indices):
        return self[tuple(indices)]

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}: {self.dtype}{format_shape(self.shape)})"


class Placeholder(_Indexable):
    """An input of a tensor expression (TVM ``te.placeholder``), bound to a builder Tensor or a
    new function argument by :func:`emit`."""

    def __init__(self, shape, dtype, name):
        self.shape, self.dtype, self.name = shape, dtype, name


class ComputeTensor(_Indexable):
    """The not-yet-emitted result of :func:`compute` over placeholders (TVM ``te.Tensor`` of a
    ``ComputeOp``); :func:`emit` turns it into a builder Tensor."""

    def __init__(self, shape, dtype, name, axes, body):
        self.shape, self.dtype, self.name, self.axes, self.body = shape, dtype, name, axes, body


def placeholder(shape: Sequence[int], dtype="float32", name: str = "placeholder") -> Placeholder:
    """An input tensor of tensor expressions (TVM ``te.placeholder``).

    Parameters
    ----------
    shape : sequence of int
        Static shape.
    dtype : str
        One of :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`.
    name : str
        The function argument's name when :func:`emit` creates it.

    Raises
    ------
    BuildError
        For a bad shape, dtype or name.
    """
    if not isinstance(name, str) or not name:
        raise BuildError(f"placeholder: argument 'name' must be a non-empty str, got {name!r}")
    return Placeholder(check_shape("placeholder", "shape", shape), dtypes.canonical_dtype(dtype), name)


def compute(shape: Sequence[int], fcompute: Callable, name: str = "compute", dtype: Optional[str] = None):
    """``out[i, j, ...] = fcompute(i, j, ...)`` as one ``linalg.generic`` (TVM ``te.compute``).

    Parameters
    ----------
    shape : sequence of int
        Output shape (its axes are the ``parallel`` loop variables, named after fcompute's
        parameters).
    fcompute : callable
        Takes one index variable per output dim (``lambda i, j: ...`` or ``lambda *i: ...``)
        and returns an expression: element accesses ``A[i + di, 2 * j]`` with affine indices,
        numbers, ``+ - * /``, ``te.max(a, b)``/``te.min(a, b)``, comparisons with
        ``te.if_then_else``, ``te.exp/log/log1p/expm1/sqrt/tanh``; or, as the whole body, a reduction
        ``te.sum/max/min(expr, axis=k)`` over ``te.reduce_axis`` variables.
    name : str
        The op's ``mlc.name`` (the block name for ``Schedule.get_block``).
    dtype : str, optional
        Output dtype (default: the body's; float32 for a body of numbers, int64 for one of
        index variables).

    Returns
    -------
    A builder Tensor (eager: every accessed tensor is a builder Tensor) or a
    :class:`ComputeTensor` (lazy: placeholders are involved, or no tensor is read; see
    :func:`emit`).

    Raises
    ------
    BuildError
        For non-affine indices (``te: index (i * j) is not affine``), accesses outside a tensor
        (``te.compute 'C': index 0 of 'A' spans [0, 5]; expected within [0, 4)``), a reduction
        inside an expression, dtype conflicts (no implicit casts), or tensors of different
        functions.
    """
    shape = check_shape("compute", "shape", shape)
    if not isinstance(name, str) or not name:
        raise BuildError(f"compute: argument 'name' must be a non-empty str, got {name!r}")
    axes = E.indices_of(shape, _axis_names(fcompute, len(shape)))
    body = E.as_expr(fcompute(*axes))
    top = body.body if isinstance(body, E.Reduce) else body
    E.check_no_reduce(top, f"'{name}'")
    out_dtype = dtypes.canonical_dtype(dtype) if dtype is not None else _resolve(_infer(body), body)
    sources = [a.tensor for a in E.accesses(body, [])]
    if sources and all(_is_builder_tensor(t) for t in sources):
        fns = {id(t.fn): t.fn for t in sources}
        if len(fns) > 1:
            raise BuildError(f"compute '{name}': it reads Tensors of different functions")
        fn = next(iter(fns.values()))
        return fn.tensor(_emit_compute(fn, shape, out_dtype, name, axes, body, {}))
    return ComputeTensor(shape, out_dtype, name, axes, body)


def emit(f, tensors, binds: Optional[Dict[Placeholder, object]] = None):
    """Emit lazy computes into the function being built ``f`` (a ``FunctionBuilder`` inside its
    ``with bb.function(...)``).

    Parameters
    ----------
    f : FunctionBuilder
    tensors : ComputeTensor or sequence of them
        What to emit (with every compute it reads, once each).
    binds : dict Placeholder -> Tensor, optional
        Builder Tensors for placeholders; the others become ``f.arg(p.name, p.shape, p.dtype)``.

    Returns
    -------
    A builder Tensor, or a tuple for a sequence.

    Raises
    ------
    BuildError
        If a bound Tensor's shape or dtype differs from its placeholder's.
    """
    env: Dict[int, object] = {}
    for p, t in (binds or {}).items():
        if tuple(t.shape) != p.shape or t.dtype != p.dtype:
            raise BuildError(f"te.emit: placeholder '{p.name}' is {p.dtype}{format_shape(p.shape)}; the "
                             f"bound Tensor is {t.dtype}{format_shape(t.shape)}")
        env[id(p)] = t
    many = isinstance(tensors, (list, tuple))
    outs = [_materialize(f, t, env) for t in (tensors if many else [tensors])]
    return tuple(outs) if many else outs[0]


def create_function(bb, name: str, tensors: Sequence) -> None:
    """Add function ``name`` to GraphBuilder ``bb`` from tensor expressions (TVM
    ``te.create_prim_func``): its placeholders are the arguments in order, its computes the
    results.

    Raises
    ------
    BuildError
        If ``tensors`` holds something other than placeholders and computes, or no compute.
    """
    outs = [t for t in tensors if isinstance(t, ComputeTensor)]
    bad = [t for t in tensors if not isinstance(t, (Placeholder, ComputeTensor))]
    if bad or not outs:
        raise BuildError(f"create_function: argument 'tensors' is {list(tensors)!r}; expected te.placeholder "
                         "and te.compute results, at least one compute")
    with bb.function(name) as f:
        binds = {p: f.arg(p.name, p.shape, p.dtype) for p in tensors if isinstance(p, Placeholder)}
        f.output(*emit(f, outs, binds))


# ---------------------------------------------------------------------------- internals
def _is_builder_tensor(t) -> bool:
    return not isinstance(t, _Indexable) and hasattr(t, "value") and hasattr(t, "fn")


def _axis_names(fcompute, n: int) -> List[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == n and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return [p.name for p in params]
    return [f"i{k}" for k in range(n)]


def _materialize(f, t, env):
    if _is_builder_tensor(t):
        return t
    if id(t) in env:
        return env[id(t)]
    if isinstance(t, Placeholder):
        env[id(t)] = f.arg(t.name, t.shape, t.dtype)
    elif isinstance(t, ComputeTensor):
        for a in E.accesses(t.body, []):
            _materialize(f, a.tensor, env)
        env[id(t)] = f.tensor(_emit_compute(f, t.shape, t.dtype, t.name, t.axes, t.body, env))
    else:
        raise BuildError(f"te.emit: {t!r} is not a te.compute result, placeholder or Tensor")
    return env[id(t)]


_INDEX = "index"  # the type of loop variables before they meet a dtype


def _infer(e) -> Optional[str]:
    """The dtype of ``e``: a dtype name, ``"index"`` (loop variables) or None (numbers only)."""
    if isinstance(e, E.Access):
        return e.tensor.dtype
    if isinstance(e, (E.IterVar, E.Affine)):
        return _INDEX
    if isinstance(e, E.Const):
        return None
    if isinstance(e, E.Compare):
        return "bool"
    if isinstance(e, E.Call):
        return _infer(e.x)
    if isinstance(e, E.Reduce):
        return _infer(e.body)
    a, b = (e.a, e.b)
    return _join(_infer(a), _infer(b), e)


def _join(ta, tb, e):
    for weak in (None, _INDEX):
        if ta == weak:
            return tb if tb is not None else ta
        if tb == weak:
            return ta
    if ta != tb:
        raise BuildError(f"te.compute: operands of {E._show(e)} have dtypes {ta} and {tb}; te does not "
                         "convert implicitly")
    return ta


def _resolve(t: Optional[str], body) -> str:
    if t is None:
        return "float32"
    if t == _INDEX:
        return "int64"
    return t


def _emit_compute(fn, shape, out_dtype, name, axes, body, env) -> ir.Value:
    """Emit the generic; returns its result value."""
    red = body.kind if isinstance(body, E.Reduce) else None
    raxes = list(body.axes) if red else []
    loops = list(axes) + raxes
    pos = {id(v): k for k, v in enumerate(loops)}
    nd = len(loops)
    nm = fn.claim_op_name(name, "te.compute")

    ins, in_maps, slot = [], [], {}
    covered = set(range(len(axes)))  # the output's identity map covers the spatial dims
    for acc in E.accesses(body, []):
        src = acc.tensor
        for d, (ix, size) in enumerate(zip(acc.indices, src.shape)):
            lo, hi = ix.bounds()
            if lo < 0 or hi >= size:
                raise BuildError(f"te.compute '{name}': index {d} of {E._tname(src)} spans [{lo}, {hi}]; "
                                 f"expected within [0, {size})")
        for ix in acc.indices:
            for v in ix.coeffs:
                if id(v) not in pos:
                    raise BuildError(f"te.compute '{name}': variable '{v.name}' is not an axis of this "
                                     "compute (a reduce axis must be reduced by te.sum/max/min)")
        key = _access_key(acc, pos)
        if key not in slot:
            t = src if _is_builder_tensor(src) else env[id(src)]
            if t.fn is not fn:
                raise BuildError(f"te.compute '{name}': {E._tname(src)} is a Tensor of another function")
            slot[key] = len(ins)
            ins.append(_window(t.value, acc.indices))
            in_maps.append(ir.AffineMap.get(nd, 0, [_affine_expr(ix, pos) for ix in acc.indices]))
            covered |= {pos[id(v)] for v, c in ix_items(acc.indices)}
    missing = [k for k in range(nd) if k not in covered]
    if missing:  # dims only in composite indices: a shape-only operand bounds them (as linalg.pooling)
        ins.append(empty([loops[k].extent for k in missing], out_dtype))
        in_maps.append(ir.AffineMap.get(nd, 0, [ir.AffineDimExpr.get(k) for k in missing]))
    out_map = ir.AffineMap.get(nd, 0, [ir.AffineDimExpr.get(k) for k in range(len(axes))])
    if red:
        init = filled(shape, out_dtype, _identity(red, out_dtype), f"{nm}.init")
    else:
        init = empty(shape, out_dtype)
    its = ["parallel"] * len(axes) + ["reduction"] * len(raxes)

    def region(*args):
        cx = _BodyEmitter(args, slot, pos, name)
        if red:
            v = cx.value(body.body, out_dtype)
            return [_combine(red, v, args[-1], out_dtype)]
        return [cx.value(body, out_dtype)]

    t = _infer(body)
    if t not in (None, _INDEX, out_dtype):
        raise BuildError(f"te.compute '{name}': the body has dtype {t}; expected {out_dtype} (dtype=)")
    return generic(nm, ins, in_maps, [init], [out_map], its, region)[0]


def _affine_expr(a: E.Affine, pos) -> ir.AffineExpr:
    """The affine expression of index ``a`` over the loop dims (``pos``: variable -> dim); a
    variable over ``[lo, hi)`` is ``d + lo``."""
    out = ir.AffineConstantExpr.get(a.const + sum(c * v.lo for v, c in a.coeffs.items()))
    for v, c in a.coeffs.items():
        out = out + ir.AffineDimExpr.get(pos[id(v)]) * c
    return out


def _access_key(acc: E.Access, pos):
    """Accesses of one tensor through one map share an operand of the generic."""
    return (id(acc.tensor), tuple(str(_affine_expr(ix, pos)) for ix in acc.indices))


def _window(value: ir.Value, indices) -> ir.Value:
    """``value``, or its leading window when a lone-variable index (``A[i]``) covers fewer
    elements than the axis has (the window sum's ``A[i] + A[i + 1]`` on ``A: (N + 2,)``): linalg
    infers each loop's range from the first operand axis indexed by that loop alone, so the
    operand is cut to ``tensor.extract_slice A[0:N]`` (the elements the access reads)."""
    shape = list(ir.RankedTensorType(value.type).shape)
    sizes = list(shape)
    for r, ix in enumerate(indices):
        if len(ix.coeffs) == 1 and list(ix.coeffs.values())[0] == 1 and ix.const == 0:
            v = next(iter(ix.coeffs))
            if v.lo == 0 and v.extent < shape[r]:
                sizes[r] = v.extent
    if sizes == shape:
        return value
    t = ir.RankedTensorType.get(sizes, ir.RankedTensorType(value.type).element_type)
    return tensor_d.ExtractSliceOp(t, value, [], [], [], [0] * len(sizes), sizes,
                                   [1] * len(sizes)).result


def ix_items(indices):
    """(variable, coefficient) pairs of indices that are a single variable (``i``, not
    ``i + di``): the loop dims an access bounds by itself."""
    for ix in indices:
        if len(ix.coeffs) == 1 and ix.const == 0 and list(ix.coeffs.values())[0] == 1:
            yield next(iter(ix.coeffs.items()))


def _identity(kind: str, dt: str):
    if kind == "sum":
        return 0
    if dtypes.is_float(dt):
        return -float("inf") if kind == "max" else float("inf")
    info = np.iinfo(np.dtype(dt))
    return int(info.min) if kind == "max" else int(info.max)


def _combine(kind: str, v, acc, dt: str):
    f = dtypes.is_float(dt)
    if kind == "sum":
        return arith_d.addf(v, acc) if f else arith_d.addi(v, acc)
    if kind == "max":
        return arith_d.maximumf(v, acc) if f else arith_d.maxsi(v, acc)
    return arith_d.minimumf(v, acc) if f else arith_d.minsi(v, acc)


_FLOAT_BIN = {"add": arith_d.addf, "sub": arith_d.subf, "mul": arith_d.mulf, "div": arith_d.divf,
              "max": arith_d.maximumf, "min": arith_d.minimumf}
_INT_BIN = {"add": arith_d.addi, "sub": arith_d.subi, "mul": arith_d.muli, "max": arith_d.maxsi,
            "min": arith_d.minsi}
_FCMP = {"lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE"}
_ICMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_MATH = {"exp": math_d.exp, "log": math_d.log, "sqrt": math_d.sqrt, "tanh": math_d.tanh,
         "log1p": math_d.log1p, "expm1": math_d.expm1}


class _BodyEmitter:
    """Emits a body expression in the generic's region (block arguments are the inputs in
    order, then the output)."""

    def __init__(self, args, slot, pos, name):
        self.args, self.slot, self.pos, self.name = args, slot, pos, name

    def value(self, e, dt: str) -> ir.Value:
        if isinstance(e, E.Access):
            return self.args[self.slot[_access_key(e, self.pos)]]
        if isinstance(e, E.Const):
            if not dtypes.is_float(dt) and float(e.value) != int(e.value):
                raise BuildError(f"te.compute '{self.name}': constant {e.value!r} in a {dt} expression")
            return scalar(e.value, dt)
        if isinstance(e, (E.IterVar, E.Affine)):
            return self._index(E.as_index(e, "index"), dt)
        if isinstance(e, E.Call):
            if not dtypes.is_float(dt):
                raise BuildError(f"te.compute '{self.name}': te.{e.fn} needs a float expression; got {dt}")
            return _MATH[e.fn](self.value(e.x, dt))
        if isinstance(e, E.Select):
            return arith_d.select(self.value(e.cond, dt), self.value(e.a, dt), self.value(e.b, dt))
        if isinstance(e, E.Compare):
            t = _infer(e.a) if _infer(e.a) not in (None, _INDEX) else _infer(e.b)
            t = dt if t in (None, _INDEX) else t
            a, b = self.value(e.a, t), self.value(e.b, t)
            if dtypes.is_float(t):
                return arith_d.cmpf(getattr(arith_d.CmpFPredicate, _FCMP[e.op]), a, b)
            return arith_d.cmpi(getattr(arith_d.CmpIPredicate, _ICMP[e.op]), a, b)
        # Binary
        a, b = self.value(e.a, dt), self.value(e.b, dt)
        if dtypes.is_float(dt):
            return _FLOAT_BIN[e.op](a, b)
        if e.op == "div":
            return divide_int(a, b, dt)
        return _INT_BIN[e.op](a, b)

    def _index(self, a: E.Affine, dt: str) -> ir.Value:
        idx = ir.IndexType.get()

        def cst(c):
            return arith_d.ConstantOp(idx, ir.IntegerAttr.get(idx, c)).result

        v = cst(a.const + sum(c * var.lo for var, c in a.coeffs.items()))
        for var, c in a.coeffs.items():
            d = linalg_d.IndexOp(self.pos[id(var)]).result
            v = arith_d.addi(v, d if c == 1 else arith_d.muli(d, cst(c)))
        i64 = ir.IntegerType.get_signless(64)
        v = arith_d.index_cast(i64, v)
        if dtypes.is_float(dt):
            return arith_d.sitofp(dtypes.to_ir_type(dt), v)
        if dt == "int64":
            return v
        return arith_d.trunci(dtypes.to_ir_type(dt), v)
