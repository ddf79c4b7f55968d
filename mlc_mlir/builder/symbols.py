"""``SymbolScope``: the symbolic sizes of one graph function being built.

A function argument declared with a string dim (``f.arg("x", shape=("batch", "seq", 128))``)
has a dynamic MLIR type (``tensor<?x?x128xf32>``) and a symbolic shape (``(batch, seq, 128)``,
:class:`~mlc_mlir.ir.symbolic.SymDim`). A symbol is *defined* by the first argument dim that is
exactly that symbol; every later use of the name means the same size (checked at call time by
the runtime). Bounds (``f.dim("seq", min=1, max=2048)``) are recorded per symbol.

The scope answers two questions for the ops:

* the symbolic shape of any tensor value of the function (:meth:`SymbolScope.shape_of`), read
  back from the IR that produced it: an argument's declared shape, a ``tensor.empty``'s dynamic
  sizes, a destination-passing op's init (``linalg.*``, ``mlc.call_library``,
  ``tensor.insert_slice``), ``tensor.expand_shape``/``collapse_shape``/``extract_slice``/
  ``concat``/``pad``/``cast``; and the expression an ``index`` value holds (``tensor.dim``,
  ``arith`` on ``index``, or a value the scope emitted);
* the ``index`` value of a symbol (:meth:`SymbolScope.atom_value`): ``tensor.dim`` of its defining
  argument, emitted once and reused (all builder ops are emitted in the function's entry block,
  so the first value dominates every later use).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .._mlir import ir, tensor_d
from ..errors import BuildError
from ..ir.emitters import index_constant
from ..ir.symbolic import Dim, FloorDiv, MinMax, SymDim, maximum, minimum, parse, symbol


class SymbolScope:
    """Symbolic sizes of one function (see the module docstring)."""

    def __init__(self, block: ir.Block):
        self.block = block
        self.arg_shapes: List[Tuple[Dim, ...]] = []
        self.sources: Dict[str, Tuple[int, int]] = {}      # symbol -> (arg number, axis)
        self.bounds: Dict[str, Tuple[int, Optional[int]]] = {}
        self._values: Dict[str, ir.Value] = {}             # str(expr) -> index value
        self._exprs: Dict[ir.Value, Dim] = {}              # index value -> expr
        self._shapes: Dict[ir.Value, Tuple[Dim, ...]] = {}

    # ------------------------------------------------------------ declaring
    def declare(self, name: str, min: Optional[int] = 0, max: Optional[int] = None) -> SymDim:
        """Bounds of symbol ``name`` (``min <= name <= max``; ``max=None``: unbounded); with
        ``min=None`` nothing is declared (the symbol itself is returned).

        Raises
        ------
        BuildError
            For a name that is not an identifier, bounds that are not ints with
            ``0 <= min <= max``, or a second declaration with other bounds.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise BuildError(f"dim: argument 'name' is {name!r}; expected an identifier")
        if min is None:
            return symbol(name, self)
        ok = isinstance(min, int) and min >= 0 and (max is None or isinstance(max, int) and max >= min)
        if not ok:
            raise BuildError(f"dim: '{name}' has bounds min={min!r}, max={max!r}; expected ints "
                             "with 0 <= min <= max (max=None: unbounded)")
        if name in self.bounds and self.bounds[name] != (min, max):
            raise BuildError(f"dim: '{name}' is already declared with min={self.bounds[name][0]}, "
                             f"max={self.bounds[name][1]}")
        self.bounds[name] = (min, max)
        return symbol(name, self)

    def arg_shape(self, op: str, shape) -> Tuple[Dim, ...]:
        """An argument's declared shape: ints stay, strings are parsed into SymDims
        (``"seq"``, ``"2*seq"``); plain symbols seen first here are defined by this argument.

        Raises
        ------
        BuildError
            For a string that is not an expression of names and ints.
        """
        out: List[Dim] = []
        arg_no = len(self.arg_shapes)
        for axis, d in enumerate(shape):
            if isinstance(d, str):
                d = parse(d, self)
                if isinstance(d, int):
                    raise BuildError(f"{op}: dim {axis} of the shape is the constant expression "
                                     f"{shape[axis]!r}; write it as an int")
                if d.symbol is not None:
                    self.sources.setdefault(d.symbol, (arg_no, axis))
            out.append(d)
        self.arg_shapes.append(tuple(out))
        return tuple(out)

    def lower_bound(self, d: Dim) -> Optional[int]:
        """A lower bound of ``d`` from the symbols' declared bounds (a symbol without bounds
        is >= 0), or None when the bounds do not give one."""
        return self._range(d)[0]

    def upper_bound(self, d: Dim) -> Optional[int]:
        """An upper bound of ``d`` from the symbols' declared bounds, or None when a symbol it
        grows with is unbounded."""
        return self._range(d)[1]

    def minimum(self, a: Dim, b: Dim) -> Dim:
        """``min(a, b)``: the one the declared bounds prove smaller, else
        :func:`~mlc_mlir.ir.symbolic.minimum` (a ``min`` atom unless a constant difference
        decides)."""
        lo, hi = self._range(a - b)
        if hi is not None and hi <= 0:
            return a
        if lo is not None and lo >= 0:
            return b
        return self._bind(minimum(a, b))

    def maximum(self, a: Dim, b: Dim) -> Dim:
        """``max(a, b)``, as :meth:`minimum`."""
        lo, hi = self._range(a - b)
        if lo is not None and lo >= 0:
            return a
        if hi is not None and hi <= 0:
            return b
        return self._bind(maximum(a, b))

    def _range(self, d: Dim) -> Tuple[Optional[int], Optional[int]]:
        if isinstance(d, int):
            return d, d
        for m, c in d.terms:   # r + c*max(a, b) = max(r + c*a, r + c*b) (c > 0; min for c < 0)
            if len(m) == 1 and isinstance(m[0], MinMax):
                rest = d - SymDim({m: c})
                ranges = [self._range(rest + c * a) for a in m[0].args]
                return _extremum_range("max" if (m[0].kind == "max") == (c > 0) else "min", ranges)
        lo_sum: Optional[int] = 0
        hi_sum: Optional[int] = 0
        for m, c in d.terms:
            ranges = [self._atom_range(a) for a in m]
            if len(ranges) == 1:
                lo_p, hi_p = ranges[0]
            elif all(lo is not None and lo >= 0 for lo, _ in ranges):   # a product of sizes >= 0
                lo_p, hi_p = 1, 1
                for alo, ahi in ranges:
                    lo_p = lo_p * alo
                    hi_p = None if hi_p is None or ahi is None else hi_p * ahi
            else:
                lo_p = hi_p = None
            lo_t, hi_t = (c * lo_p if lo_p is not None else None, c * hi_p if hi_p is not None else None)
            if c < 0:
                lo_t, hi_t = hi_t, lo_t
            lo_sum = None if lo_sum is None or lo_t is None else lo_sum + lo_t
            hi_sum = None if hi_sum is None or hi_t is None else hi_sum + hi_t
        return lo_sum, hi_sum

    def _atom_range(self, a) -> Tuple[Optional[int], Optional[int]]:
        if isinstance(a, str):
            return self.bounds.get(a, (0, None))
        if isinstance(a, FloorDiv):
            nlo, nhi = self._range(a.num)
            return (None if nlo is None else nlo // a.den), (None if nhi is None else nhi // a.den)
        return _extremum_range(a.kind, [self._range(d) for d in a.args])

    def check_defined(self, where: str, shape) -> None:
        """Raise BuildError if a dim of ``shape`` uses a symbol no argument dim defines
        (the runtime could not compute it)."""
        for d in shape:
            if isinstance(d, SymDim):
                missing = [s for s in d.symbols() if s not in self.sources]
                if missing:
                    raise BuildError(f"{where}: size {d} uses {missing}, which no argument dim defines "
                                     "(declare an argument dim that is exactly that name)")

    # ------------------------------------------------------------ emitting
    def cached(self, expr: SymDim) -> Optional[ir.Value]:
        """The ``index`` value already emitted for ``expr``, or None."""
        return self._values.get(str(expr))

    def record(self, value: ir.Value, expr: Dim) -> None:
        """Remember that ``value`` (``index``) holds ``expr``."""
        self._values.setdefault(str(expr), value)
        self._exprs[value] = expr

    def atom_value(self, name: str) -> ir.Value:
        """``tensor.dim`` of the argument dim that defines ``name`` (emitted once).

        Raises
        ------
        BuildError
            If no argument dim defines ``name``.
        """
        v = self._values.get(name)
        if v is not None:
            return v
        if name not in self.sources:
            raise BuildError(f"symbolic size '{name}': no argument dim defines it")
        arg, axis = self.sources[name]
        v = tensor_d.dim(self.block.arguments[arg], index_constant(axis))
        self.record(v, symbol(name, self))
        return v

    # ------------------------------------------------------------ reading back
    def shape_of(self, value: ir.Value) -> Tuple[Dim, ...]:
        """The symbolic shape of a ranked tensor value of this function.

        Raises
        ------
        BuildError
            If a dynamic dim comes from an op whose sizes the scope cannot read (e.g. the result
            of a ``func.call``).
        """
        t = ir.RankedTensorType(value.type)
        if t.has_static_shape:
            return tuple(t.shape)
        got = self._shapes.get(value)
        if got is None:
            got = tuple(self._dim(value, i) if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank))
            self._shapes[value] = got
        return got

    def _bind(self, d: Dim) -> Dim:
        return d.with_scope(self) if isinstance(d, SymDim) else d

    def _dim(self, value: ir.Value, i: int) -> Dim:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return self.arg_shapes[ir.BlockArgument(value).arg_number][i]
        op = owner.operation if hasattr(owner, "operation") else owner
        r = ir.OpResult(value).result_number
        name = op.name
        if name == "tensor.empty":
            return self._dynamic_operand(op, ir.RankedTensorType(value.type), i, list(op.operands))
        if name == "tensor.expand_shape":
            return self._dynamic_operand(op, ir.RankedTensorType(value.type), i, list(op.operands)[1:])
        if name == "tensor.extract_slice":
            return self._slice_size(op, i)
        if name == "tensor.reshape":  # its shape operand: a tensor.from_elements of index values
            shape_op = op.operands[1].owner
            return self.index_expr(list(shape_op.operands)[i])
        if name == "tensor.collapse_shape":
            src = self.shape_of(op.operands[0])
            groups = [list(ir.ArrayAttr(g)) for g in ir.ArrayAttr(op.attributes["reassociation"])]
            out: Dim = 1
            for a in groups[i]:
                out = out * src[ir.IntegerAttr(a).value]
            return out
        if name == "tensor.concat":
            axis = ir.IntegerAttr(op.attributes["dim"]).value
            if i != axis:
                return self.shape_of(op.operands[0])[i]
            total: Dim = 0
            for o in op.operands:
                total = total + self.shape_of(o)[i]
            return total
        if name == "tensor.pad" and len(op.operands) == 1:
            lo = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
            hi = list(ir.DenseI64ArrayAttr(op.attributes["static_high"]))
            return self.shape_of(op.operands[0])[i] + lo[i] + hi[i]
        if name in ("tensor.cast", "tensor.insert_slice") or name.startswith(("arith.", "math.")):
            src = op.operands[1] if name == "tensor.insert_slice" else op.operands[0]
            return self.shape_of(src)[i]
        if name.startswith("linalg.") or name == "mlc.call_library":
            nouts = len(op.results)
            if "operandSegmentSizes" in op.attributes:
                nouts = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[-1]
            init = list(op.operands)[len(op.operands) - nouts + r]
            return self.shape_of(init)[i]
        raise BuildError(f"symbolic size: dim {i} of the result of '{name}' is dynamic and its size "
                         "cannot be read from the IR; give the op static shapes")

    def _dynamic_operand(self, op, t: ir.RankedTensorType, i: int, sizes) -> Dim:
        k = sum(1 for j in range(i) if t.is_dynamic_dim(j))
        return self.index_expr(sizes[k])

    def _slice_size(self, op, i: int) -> Dim:
        segs = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        static = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        if len(static) != ir.RankedTensorType(op.results[0].type).rank:
            raise BuildError("symbolic size: a rank-reducing tensor.extract_slice with dynamic sizes")
        start = segs[0] + segs[1]
        dyn = list(op.operands)[start:start + segs[2]]
        k = sum(1 for j in range(i) if static[j] == ir.ShapedType.get_dynamic_size())
        return self.index_expr(dyn[k])

    def index_expr(self, value: ir.Value) -> Dim:
        """The expression an ``index`` value holds.

        Raises
        ------
        BuildError
            If the value is not built from constants, ``tensor.dim`` and ``arith`` integer ops.
        """
        got = self._exprs.get(value)
        if got is not None:
            return self._bind(got)
        owner = value.owner
        op = None if isinstance(owner, ir.Block) else (owner.operation if hasattr(owner, "operation") else owner)
        name = op.name if op is not None else "a block argument"
        out: Optional[Dim] = None
        if name == "arith.constant":
            out = ir.IntegerAttr(op.attributes["value"]).value
        elif name == "tensor.dim":
            axis = self.index_expr(op.operands[1])
            if isinstance(axis, int):
                out = self.shape_of(op.operands[0])[axis]
        elif name in ("arith.addi", "arith.subi", "arith.muli", "arith.floordivsi", "arith.divui",
                      "arith.divsi", "arith.minsi", "arith.maxsi"):
            a, b = self.index_expr(op.operands[0]), self.index_expr(op.operands[1])
            if name == "arith.minsi":
                out = minimum(a, b)
            elif name == "arith.maxsi":
                out = maximum(a, b)
            elif name == "arith.addi":
                out = a + b
            elif name == "arith.subi":
                out = a - b
            elif name == "arith.muli":
                out = a * b
            elif isinstance(b, int) and b > 0:
                out = a // b
        if out is None:
            raise BuildError(f"symbolic size: an index value defined by {name} is not an expression "
                             "of argument sizes")
        self._exprs[value] = out
        return self._bind(out)


def _extremum_range(kind: str, ranges) -> Tuple[Optional[int], Optional[int]]:
    """The range of ``min`` (``kind``) or ``max`` of values in ``ranges`` (``(lo, hi)`` pairs,
    None: unbounded)."""
    los, his = [lo for lo, _ in ranges], [hi for _, hi in ranges]
    known_lo, known_hi = [v for v in los if v is not None], [v for v in his if v is not None]
    if kind == "min":
        return (None if len(known_lo) < len(los) else min(known_lo)), (min(known_hi) if known_hi else None)
    return (max(known_lo) if known_lo else None), (None if len(known_hi) < len(his) else max(known_hi))
