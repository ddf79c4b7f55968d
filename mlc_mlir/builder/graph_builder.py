"""``GraphBuilder``: emit graph functions (``func.func`` on tensors) with shape/dtype checking.

The builder owns the MLIR context, the insertion point and the names of ops; ops from
:mod:`mlc_mlir.ops` emit linalg/tensor/arith IR at the current function's insertion point. The
result of :meth:`GraphBuilder.finish` is a verified :class:`~mlc_mlir.ir.module.Module`.

Example
-------
>>> bb = GraphBuilder()
>>> with bb.function("main") as f:
...     x = f.arg("x", shape=(1, 64), dtype="float32")
...     f.output(ops.relu(x))
>>> mod = bb.finish()
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np

from .._mlir import func_d, ir
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.context import new_context
from ..ir.module import ARG_NAME_ATTR, PARAM_ATTR, Module


class Tensor:
    """A tensor value of the function being built (an SSA value of ``tensor<...>`` type).

    Attributes
    ----------
    shape : tuple of int
        Static shape.
    dtype : str
        dtype name (``'float32'``, ...).
    """

    __slots__ = ("value", "fn")
    __array_priority__ = 1000  # numpy defers to our operators: np_array + tensor -> ops.add

    def __init__(self, value: ir.Value, fn: "FunctionBuilder"):
        self.value = value
        self.fn = fn

    @property
    def type(self) -> ir.RankedTensorType:
        """The MLIR ``RankedTensorType``."""
        return ir.RankedTensorType(self.value.type)

    @property
    def shape(self) -> tuple:
        """Static shape as a tuple of ints."""
        return tuple(self.type.shape)

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self.shape)

    @property
    def dtype(self) -> str:
        """dtype name."""
        return dtypes.from_ir_type(self.type.element_type)

    def __repr__(self) -> str:
        return f"Tensor({self.dtype}{format_shape(self.shape)})"

    # numpy-style operators; each emits the op of the same name
    def __add__(self, o):
        from . import elementwise
        return elementwise.add(self, o)

    def __radd__(self, o):
        from . import elementwise
        return elementwise.add(o, self)

    def __sub__(self, o):
        from . import elementwise
        return elementwise.subtract(self, o)

    def __rsub__(self, o):
        from . import elementwise
        return elementwise.subtract(o, self)

    def __mul__(self, o):
        from . import elementwise
        return elementwise.multiply(self, o)

    def __rmul__(self, o):
        from . import elementwise
        return elementwise.multiply(o, self)

    def __truediv__(self, o):
        from . import elementwise
        return elementwise.divide(self, o)

    def __rtruediv__(self, o):
        from . import elementwise
        return elementwise.divide(o, self)

    def __neg__(self):
        from . import elementwise
        return elementwise.negative(self)

    def __matmul__(self, o):
        from . import nn
        return nn.matmul(self, o)


class FunctionBuilder:
    """Builds one ``func.func``: arguments, ops (through :mod:`mlc_mlir.ops`) and outputs.

    Obtained from ``GraphBuilder.function(name)``; not constructed directly.
    """

    def __init__(self, builder: "GraphBuilder", name: str, func_op: func_d.FuncOp):
        self.builder = builder
        self.name = name
        self.func_op = func_op
        self.block = func_op.regions[0].blocks.append()
        self._arg_attrs: List[ir.DictAttr] = []
        self._op_names: Dict[str, int] = {}
        self._outputs: Optional[List[Tensor]] = None
        self._open = True

    # ----------------------------------------------------------------- arguments
    def arg(self, name: str, shape: Sequence[int], dtype="float32") -> Tensor:
        """Add a function argument (an input passed at call time).

        Parameters
        ----------
        name : str
            Argument name (used in error messages and by the Executable).
        shape : sequence of int
            Static shape; every dimension >= 0.
        dtype : str or numpy dtype
            One of :data:`mlc_mlir.ir.dtypes.ALL_DTYPES`.

        Raises
        ------
        BuildError
            On a bad shape or dtype, a duplicate name, or after ``output``.
        """
        return self._add_arg(name, shape, dtype, {ARG_NAME_ATTR: ir.StringAttr.get(name)})

    def param(self, name: str, value: np.ndarray) -> Tensor:
        """Add a weight as a parameter argument (Relax-style): passed at call time, not a constant.

        The value is stored in ``Module.params``; an Executable fills it in when called without it,
        and ``Module.bind_params()`` turns it into a constant.

        Raises
        ------
        BuildError
            If ``value`` is not a numpy array of a supported dtype or the name is taken.
        """
        if not isinstance(value, np.ndarray):
            raise BuildError(f"param: argument 'value' of '{name}' is {type(value).__name__}; "
                             "expected numpy.ndarray")
        if name in self.builder._params:
            raise BuildError(f"param: parameter name '{name}' is already used")
        t = self._add_arg(name, value.shape, value.dtype,
                          {ARG_NAME_ATTR: ir.StringAttr.get(name), PARAM_ATTR: ir.UnitAttr.get()})
        self.builder._params[name] = np.ascontiguousarray(value)
        return t

    def _add_arg(self, name, shape, dtype, attrs) -> Tensor:
        self._check_open("arg")
        if not isinstance(name, str) or not name:
            raise BuildError(f"arg: argument 'name' must be a non-empty str, got {name!r}")
        taken = [ir.StringAttr(ir.DictAttr(a)[ARG_NAME_ATTR]).value for a in self._arg_attrs]
        if name in taken:
            raise BuildError(f"arg: function '{self.name}' already has an argument named '{name}'")
        shape = _check_shape("arg", "shape", shape)
        with self.builder.context, ir.Location.unknown():
            t = ir.RankedTensorType.get(shape, dtypes.to_ir_type(dtype))
            v = self.block.add_argument(t, ir.Location.unknown())
            self._arg_attrs.append(ir.DictAttr.get(attrs))
        return Tensor(v, self)

    # ----------------------------------------------------------------- outputs
    def output(self, *tensors: Tensor) -> None:
        """Set the function's results (one or more Tensors of this function).

        Raises
        ------
        BuildError
            If called twice, with no tensor, or with a value that is not a Tensor of this function.
        """
        self._check_open("output")
        if self._outputs is not None:
            raise BuildError(f"output: function '{self.name}' already has outputs")
        if not tensors:
            raise BuildError(f"output: function '{self.name}' needs at least one output")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor) or t.fn is not self:
                raise BuildError(f"output: result {i} of '{self.name}' is {t!r}; expected a Tensor "
                                 "built in this function")
        self._outputs = list(tensors)

    # ----------------------------------------------------------------- helpers for ops
    def unique_op_name(self, base: str) -> str:
        """``base`` for the first op of that name in the function, then ``base_1``, ``base_2``..."""
        n = self._op_names.get(base)
        if n is None:
            self._op_names[base] = 0
            return base
        while True:
            n += 1
            cand = f"{base}_{n}"
            if cand not in self._op_names:
                self._op_names[base] = n
                self._op_names[cand] = 0
                return cand

    def claim_op_name(self, name: str, op_kind: str) -> str:
        """Reserve a user-given op name (``name=``); raises BuildError if already used."""
        if not isinstance(name, str) or not name:
            raise BuildError(f"{op_kind}: argument 'name' must be a non-empty str, got {name!r}")
        if name in self._op_names:
            raise BuildError(f"{op_kind}: op name '{name}' is already used in function '{self.name}'")
        self._op_names[name] = 0
        return name

    def _check_open(self, what: str) -> None:
        if not self._open:
            raise BuildError(f"{what}: function '{self.name}' is finished; build ops inside "
                             "`with bb.function(...)`")

    def _finish(self) -> None:
        if self._outputs is None:
            raise BuildError(f"function '{self.name}': no outputs; call f.output(...)")
        with self.builder.context, ir.Location.unknown(), ir.InsertionPoint(self.block):
            func_d.ReturnOp([t.value for t in self._outputs])
            in_types = [a.type for a in self.block.arguments]
            out_types = [t.value.type for t in self._outputs]
            self.func_op.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(in_types, out_types))
            if self._arg_attrs:
                self.func_op.attributes["arg_attrs"] = ir.ArrayAttr.get(self._arg_attrs)
        self._open = False


class GraphBuilder:
    """Builds a :class:`~mlc_mlir.ir.module.Module` of graph functions.

    Owns the MLIR context and module; ``function(name)`` opens a function whose ops are emitted by
    :mod:`mlc_mlir.ops`; ``finish()`` verifies and returns the Module. Source: Relax's
    ``BlockBuilder`` and iree-turbine's builders (own context, insertion point, verify on finish).
    """

    def __init__(self):
        self.context = new_context()
        with self.context, ir.Location.unknown():
            self.module = ir.Module.create()
        self._functions: Dict[str, FunctionBuilder] = {}
        self._params: Dict[str, np.ndarray] = {}
        self._constants: List[np.ndarray] = []  # keeps dense_resource buffers alive
        self._current: Optional[FunctionBuilder] = None
        self._finished = False
        self._failed: List[str] = []

    @contextlib.contextmanager
    def function(self, name: str) -> Iterator[FunctionBuilder]:
        """Open a graph function ``name`` (a public ``func.func``); use as a context manager.

        Raises
        ------
        BuildError
            If the name is taken, a function is already open, or the builder is finished.
        """
        if self._finished:
            raise BuildError("function: the GraphBuilder is finished")
        if self._current is not None:
            raise BuildError(f"function: '{self._current.name}' is still open; functions do not nest")
        if not isinstance(name, str) or not name.isidentifier():
            raise BuildError(f"function: name {name!r} is not an identifier")
        if name in self._functions:
            raise BuildError(f"function: a function named '{name}' already exists")
        with self.context, ir.Location.unknown(), ir.InsertionPoint(self.module.body):
            fop = func_d.FuncOp(name, ir.FunctionType.get([], []))
        fb = FunctionBuilder(self, name, fop)
        self._functions[name] = fb
        self._current = fb
        try:
            with self.context, ir.Location.name(name), ir.InsertionPoint(fb.block):
                yield fb
            fb._finish()
        except BaseException as e:
            # keep the half-built function (its values may still be referenced by the caller's
            # Tensors, erasing it would leave them dangling); finish() refuses the module
            self._failed.append(f"{name}: {type(e).__name__}: {e}")
            raise
        finally:
            self._current = None

    def finish(self) -> Module:
        """Verify and return the Module (the builder cannot be used afterwards).

        Raises
        ------
        BuildError
            If there is no function.
        IRError
            If the IR does not verify (a bug in an op's emission; the message has the diagnostics).
        """
        if not self._functions:
            raise BuildError("finish: the module has no function; use `with bb.function(name)`")
        if self._failed:
            raise BuildError(f"finish: a function failed to build ({self._failed[0]}); start a new GraphBuilder")
        self._finished = True
        mod = Module(self.module, self.context, self._params)
        mod._keepalive = self._constants
        return mod.verify()


def _check_shape(op: str, arg: str, shape) -> tuple:
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise BuildError(f"{op}: argument '{arg}' must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise BuildError(f"{op}: argument '{arg}' has negative dimensions: {format_shape(shape)}")
    return shape
