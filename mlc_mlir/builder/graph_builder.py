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
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._mlir import func_d, ir, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.constants import Blobs
from ..ir.context import new_context
from ..ir.emitters import check_shape
from ..ir.module import ARG_NAME_ATTR, CHECK_ATTR, DIMS_ATTR, PARAM_ATTR, SHAPE_ATTR, Module
from ..ir.symbolic import SymDim, is_static
from ..runtime import registry
from . import linalg_emit as emit
from .symbols import SymbolScope
from .tensor import Tensor, pop_function, push_function


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
        self._checks: List[Tuple[Tensor, str]] = []
        self._written: List[tuple] = []  # (message prefix, arg, value) of write_argument
        self._open = True
        self.symbols = SymbolScope(self.block)

    # ----------------------------------------------------------------- arguments
    def arg(self, name: str, shape: Sequence[int], dtype="float32") -> Tensor:
        """Add a function argument (an input passed at call time).

        Parameters
        ----------
        name : str
            Argument name (used in error messages and by the Executable).
        shape : sequence of int or str
            Python or numpy ints >= 0 whose product fits int64, and symbolic sizes: a string
            (``"seq"``, or an expression such as ``"2*seq"``) is a dynamic dim
            (``tensor<?x...>``). A name used in several dims or arguments means one size (checked
            when the function is called); bounds come from :meth:`dim`. Two different names are
            treated as possibly different sizes: an op that needs them equal (matmul's K, an
            elementwise op, which broadcasts a symbolic size only against 1) raises BuildError
            at build time rather than checking at run time; use one name. Source: TVM Relax's
            ``R.Tensor(("n", 784))``.
        dtype : str or numpy dtype
            One of :data:`mlc_mlir.ir.dtypes.ALL_DTYPES`.

        Raises
        ------
        BuildError
            On a bad shape (``arg: argument 'shape' is (2.7, 3); expected a sequence of ints``,
            an element count over 2**63 - 1) or dtype, a name that is not a non-empty str, a
            duplicate name, or after ``output``.
        """
        _check_name("arg", name)
        return self._add_arg(name, shape, dtype, {ARG_NAME_ATTR: ir.StringAttr.get(name)})

    def dim(self, name: str, min: Optional[int] = None, max: Optional[int] = None) -> SymDim:
        """The symbolic size ``name``; with ``min`` and/or ``max``, also declare its bounds
        (``min <= name <= max``; ``min`` defaults to 0, ``max`` to unbounded), before or after
        the arguments that use it. A call outside the bounds raises ``ExecutionError``; slices
        along a symbolic axis need bounds that prove them in range.

        Returns
        -------
        SymDim
            The size, usable in shapes of ops (``ops.reshape(x, (f.dim("n"), 4))``).

        Raises
        ------
        BuildError
            For a name that is not an identifier, bounds that are not ints with
            ``0 <= min <= max``, or other bounds than an earlier declaration's.
        """
        self._check_open("dim")
        if min is None and max is None:
            return self.symbols.declare(name, None, None)
        return self.symbols.declare(name, 0 if min is None else min, max)

    def param(self, name: str, value: np.ndarray) -> Tensor:
        """Add a weight as a parameter argument (Relax-style): passed at call time, not a constant.

        The value is stored in ``Module.params``; an Executable fills it in when called without it,
        and ``Module.bind_params()`` turns it into a constant.

        Raises
        ------
        BuildError
            If ``value`` is not a numpy array of a supported dtype or the name is taken.
        """
        _check_name("param", name)
        if not isinstance(value, np.ndarray):
            raise BuildError(f"param: argument 'value' of '{name}' is {type(value).__name__}; "
                             "expected numpy.ndarray")
        if name in self.builder._params:
            raise BuildError(f"param: parameter name '{name}' is already used")
        t = self._add_arg(name, value.shape, value.dtype,
                          {ARG_NAME_ATTR: ir.StringAttr.get(name), PARAM_ATTR: ir.UnitAttr.get()})
        self.builder._params[name] = np.ascontiguousarray(value).reshape(value.shape)  # keep 0-d
        return t

    def _add_arg(self, name, shape, dtype, attrs) -> Tensor:
        self._check_open("arg")
        taken = [ir.StringAttr(ir.DictAttr(a)[ARG_NAME_ATTR]).value for a in self._arg_attrs]
        if name in taken:
            raise BuildError(f"arg: function '{self.name}' already has an argument named '{name}'")
        try:
            items = list(shape)
        except TypeError:
            items = None
        symbolic = items is not None and any(isinstance(d, str) for d in items)
        # ints checked as a static shape (a string dim stands in as 0)
        check_shape("arg", "shape", [0 if isinstance(d, str) else d for d in items] if symbolic else shape)
        with self.builder.context, ir.Location.unknown():
            sym = self.symbols.arg_shape("arg", [d if isinstance(d, str) else int(d) for d in items])
            if symbolic:
                attrs = dict(attrs, **{SHAPE_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(str(d)) for d in sym])})
            t = ir.RankedTensorType.get(emit.ir_shape(sym), dtypes.to_ir_type(dtype))
            v = self.block.add_argument(t, ir.Location.unknown())
            self._arg_attrs.append(ir.DictAttr.get(attrs))
        return Tensor(v, self)

    def tensor(self, value: ir.Value) -> Tensor:
        """The Tensor of this function for an SSA value emitted in it (how emitters outside
        ``builder/``, e.g. ``te.compute``, hand results back).

        Raises
        ------
        BuildError
            If ``value`` is not a ranked tensor value.
        """
        self._check_open("tensor")
        if not isinstance(value, ir.Value) or not isinstance(value.type, ir.RankedTensorType):
            raise BuildError(f"tensor: argument 'value' is {value!r}; expected a ranked tensor ir.Value")
        return Tensor(value, self)

    # ----------------------------------------------------------------- calls
    def call(self, callee: str, *args, out_shapes=None, out_dtypes=None,
             name: Optional[str] = None) -> Union[Tensor, tuple]:
        """Call a function of this module or a registered kernel (Relax's ``call_tir`` /
        ``call_dps_packed``).

        * A function built earlier in this GraphBuilder: emits ``func.call @callee(args)``; the
          result types come from its signature (``out_shapes``/``out_dtypes``, if given, must
          agree).
        * A kernel registered with :func:`mlc_mlir.register_func` (or a native provider such as
          ``openblas.sgemm``): emits ``tensor.empty`` (the destination) and
          ``mlc.call_library {callee}`` (destination-passing, lowered by ``compile``); needs
          ``out_shapes`` and ``out_dtypes`` (one output, at most 6 inputs).

        Parameters
        ----------
        callee : str
            Function or kernel name.
        *args : Tensor or numpy.ndarray
            Inputs (numpy arrays become constants).
        out_shapes : sequence of int, or a list of them
            Output shape(s) (``(1, 128)`` or ``[(1, 128)]``).
        out_dtypes : str or list of str
            Output dtype(s) (default ``"float32"`` for a kernel).
        name : str, optional
            ``mlc.name`` of the call op.

        Returns
        -------
        Tensor, or a tuple of Tensors for a function with several results.

        Raises
        ------
        BuildError
            For an unknown callee (lists the functions and kernels), the function being built
            itself, a wrong number or type of arguments (``call: argument 1 of 'linear0' is
            float32(1, 10); expected float32(1, 784)``), missing or mismatched ``out_shapes``/
            ``out_dtypes``, or more than one kernel output.
        """
        op = "call"
        self._check_open(op)
        if not isinstance(callee, str) or not callee:
            raise BuildError(f"{op}: argument 'callee' must be a non-empty str, got {callee!r}")
        if callee == self.name:
            raise BuildError(f"{op}: function '{self.name}' cannot call itself")
        ins = [emit.tensor_arg(op, f"args[{i}]", a) for i, a in enumerate(args)]
        for i, t in enumerate(ins):
            if t.fn is not self:
                raise BuildError(f"{op}: argument {i} of '{callee}' is a Tensor of function '{t.fn.name}'; "
                                 f"expected one of '{self.name}'")
        outs = _out_types(op, callee, out_shapes, out_dtypes)
        nm = emit.op_name(self, op if callee not in self.builder._functions else callee, name)
        fb = self.builder._functions.get(callee)
        if fb is not None:
            ftype = ir.FunctionType(ir.TypeAttr(fb.func_op.attributes["function_type"]).value)
            want_in, want_out = list(ftype.inputs), list(ftype.results)
            if len(ins) != len(want_in):
                raise BuildError(f"{op}: '{callee}' takes {len(want_in)} arguments; got {len(ins)}")
            for i, (t, w) in enumerate(zip(ins, want_in)):
                if t.value.type != w:
                    raise BuildError(f"{op}: argument {i} of '{callee}' is {_spec(t.value.type)}; "
                                     f"expected {_spec(w)}")
            if outs is not None and [str(o) for o in outs] != [str(w) for w in want_out]:
                raise BuildError(f"{op}: out_shapes/out_dtypes give {[_spec(o) for o in outs]}; "
                                 f"'{callee}' returns {[_spec(w) for w in want_out]}")
            call = func_d.CallOp(want_out, ir.FlatSymbolRefAttr.get(callee), [t.value for t in ins])
            emit.set_name(call, nm)
            results = [Tensor(r, self) for r in call.results]
            return results[0] if len(results) == 1 else tuple(results)
        if not registry.is_known(callee):
            raise BuildError(f"{op}: '{callee}' is neither a function of this module "
                             f"{sorted(self.builder._functions)} nor a registered kernel (mlc.register_func)")
        if outs is None:
            raise BuildError(f"{op}: kernel '{callee}' needs out_shapes= (and out_dtypes=)")
        if len(outs) != 1:
            raise BuildError(f"{op}: kernel '{callee}' gets {len(outs)} outputs; mlc.call_library has one")
        init = tensor_d.EmptyOp(list(outs[0].shape), outs[0].element_type).result
        res = emit.call_library(callee, [t.value for t in ins], init, nm)
        return Tensor(res.results[0], self)

    # ----------------------------------------------------------------- outputs
    def output(self, *tensors: Tensor) -> None:
        """Set the function's results (one or more Tensors of this function).

        A tensor returned more than once (``f.output(a, a)``) is copied (an identity
        ``linalg.generic`` named ``output<i>.copy``) for each repetition, so every result is its
        own buffer after bufferization (returning one SSA value twice breaks
        ``buffer-results-to-out-params``).

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
        outs: List[Tensor] = []
        for i, t in enumerate(tensors):
            if any(t.value == o.value for o in outs):
                t = emit.copy(t, emit.op_name(self, "copy", f"output{i}.copy"))
            outs.append(t)
        self._outputs = outs

    def write_argument(self, arg: Tensor, value: Tensor) -> None:
        """Make ``arg`` an in/out argument: the call writes ``value`` into the caller's array of
        ``arg`` in place (a donated input, as XLA's ``donate_argnums``; TVM Relax's in-place
        ``call_tir_inplace``), e.g. a KV cache updated at one position per decode step.

        ``value`` must be ``arg`` updated by a chain of :func:`~mlc_mlir.ops.update_slice`
        (``tensor.insert_slice``) ops, ``arg``'s only reader, and be read by a later op: then
        One-Shot Bufferize writes each slice into ``arg``'s buffer and nothing copies the rest.
        The argument gets ``bufferization.writable = true``.

        Raises
        ------
        BuildError
            If ``arg`` is not an argument of this function, ``value`` is not such a chain, ``arg``
            has another reader, or (when the function is finished) ``value`` is unused: the write
        would be dead code.
        """
        self._check_open("write_argument")
        if not isinstance(arg, Tensor) or arg.fn is not self or not isinstance(arg.value.owner, ir.Block):
            raise BuildError(f"write_argument: argument 'arg' is {arg!r}; expected an argument of "
                             f"function '{self.name}'")
        i = arg.value.arg_number
        what = f"write_argument: argument {i} of '{self.name}'"
        v = value.value if isinstance(value, Tensor) else None
        while v is not None and v != arg.value:
            op = v.owner
            if isinstance(op, ir.Block) or op.name != "tensor.insert_slice":
                v = None
            else:
                v = op.operands[1]  # the destination
        if v is None:
            raise BuildError(f"{what}: 'value' is not the argument updated by update_slice ops; "
                             "expected a chain of update_slice(arg, ...)")
        self._written.append((what, arg, value))
        with self.builder.context:
            d = {a.name: a.attr for a in self._arg_attrs[i]}
            d["bufferization.writable"] = ir.BoolAttr.get(True)
            self._arg_attrs[i] = ir.DictAttr.get(d)

    # ----------------------------------------------------------------- helpers for ops
    def add_check(self, status: Tensor, message: str) -> None:
        """Register a run-time precondition of an op (an index in range...): ``status`` is an
        int64 Tensor of this function whose elements hold
        :data:`~mlc_mlir.ir.module.CHECK_PASSED` (INT64_MIN) where it holds, else the offending
        value. It becomes a trailing result marked ``mlc.check = message`` that the runtime
        drops from the results, raising ``ExecutionError(message)`` (``{value}`` replaced by
        the first offending value) when an element failed. Source: TVM's ``assert_stmt`` in generated code,
        turned into a returned status as the C ABI's error code.

        Raises
        ------
        BuildError
            If ``status`` is not an int64 Tensor of this function.
        """
        self._check_open("add_check")
        if not isinstance(status, Tensor) or status.fn is not self or status.dtype != "int64":
            raise BuildError(f"add_check: status is {status!r}; expected an int64 Tensor of "
                             f"function '{self.name}'")
        self._checks.append((status, message))

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
        for what, arg, value in self._written:
            readers = list(arg.value.uses)
            if len(readers) != 1 or readers[0].owner.name != "tensor.insert_slice" or readers[0].operand_number != 1:
                raise BuildError(f"{what}: the argument has {len(readers)} readers; expected only the "
                                 "update_slice that writes it (a later reader would see the new values)")
            if not list(value.value.uses):
                raise BuildError(f"{what}: the updated value is never read; expected a later op to "
                                 "read it (an unread update is dead code)")
        with self.builder.context, ir.Location.unknown(), ir.InsertionPoint(self.block):
            results = [t.value for t in self._outputs] + [c.value for c, _ in self._checks]
            func_d.ReturnOp(results)
            in_types = [a.type for a in self.block.arguments]
            self.func_op.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(in_types, [v.type for v in results]))
            if self._arg_attrs:
                self.func_op.attributes["arg_attrs"] = ir.ArrayAttr.get(self._arg_attrs)
            shapes = [t.shape for t in self._outputs]
            checks = [(t.shape, m) for t, m in self._checks]
            dynamic = not all(is_static(s) for s in shapes + [s for s, _ in checks])
            if dynamic:
                for i, s in enumerate(shapes):
                    self.symbols.check_defined(f"output: result {i} of '{self.name}'", s)

            def shape_attr(s):
                return {} if is_static(s) else {SHAPE_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(str(d)) for d in s])}

            if dynamic or checks:
                self.func_op.attributes["res_attrs"] = ir.ArrayAttr.get(
                    [ir.DictAttr.get(shape_attr(s)) for s in shapes] +
                    [ir.DictAttr.get({**shape_attr(s), CHECK_ATTR: ir.StringAttr.get(m)}) for s, m in checks])
            if self.symbols.bounds:
                i64 = lambda lo, hi: ir.DenseI64ArrayAttr.get([lo, -1 if hi is None else hi])  # noqa: E731
                self.func_op.attributes[DIMS_ATTR] = ir.DictAttr.get(
                    {n: i64(*b) for n, b in sorted(self.symbols.bounds.items())})
        self._open = False


class GraphBuilder:
    """Builds a :class:`~mlc_mlir.ir.module.Module` of graph functions.

    Owns the MLIR context and module; ``function(name)`` opens a function whose ops are emitted by
    :mod:`mlc_mlir.ops`; ``finish()`` verifies and returns the Module. Source: Relax's
    ``BlockBuilder`` and iree-turbine's builders (own context, insertion point, verify on finish).
    """

    def __init__(self):
        self._constants = Blobs()  # keeps dense_resource buffers (and IRDL modules) alive
        self.context = new_context(self._constants)
        with self.context, ir.Location.unknown():
            self.module = ir.Module.create()
        self._functions: Dict[str, FunctionBuilder] = {}
        self._params: Dict[str, np.ndarray] = {}
        self._current: Optional[FunctionBuilder] = None
        self._finished = False
        self._failed: List[str] = []

    @contextlib.contextmanager
    def function(self, name: str, private: bool = False) -> Iterator[FunctionBuilder]:
        """Open a graph function ``name`` (a ``func.func``); use as a context manager.

        Parameters
        ----------
        name : str
        private : bool
            Give the function ``sym_visibility = "private"``: a helper that other functions
            ``call``, which compiled modules do not expose and dead-code elimination
            (``mlc-dce``, upstream ``symbol-dce``) removes when nothing calls it. Default: a
            public function (an entry point).

        Raises
        ------
        BuildError
            If the name is taken, a function is already open, the builder is finished, or
            ``private`` is not a bool.
        """
        if not isinstance(private, bool):
            raise BuildError(f"function: argument 'private' is {private!r}; expected True or False")
        if self._finished:
            raise BuildError("function: the GraphBuilder is finished")
        if self._current is not None:
            raise BuildError(f"function: '{self._current.name}' is still open; functions do not nest")
        if not isinstance(name, str) or not name.isidentifier():
            raise BuildError(f"function: name {name!r} is not an identifier")
        if name in self._functions:
            raise BuildError(f"function: a function named '{name}' already exists")
        with self.context, ir.Location.unknown(), ir.InsertionPoint(self.module.body):
            fop = func_d.FuncOp(name, ir.FunctionType.get([], []), visibility="private" if private else None)
        fb = FunctionBuilder(self, name, fop)
        self._functions[name] = fb
        self._current = fb
        push_function(fb)
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
            pop_function(fb)

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


def _check_name(op: str, name) -> None:
    """Raises BuildError unless ``name`` is a non-empty str."""
    if not isinstance(name, str) or not name:
        raise BuildError(f"{op}: argument 'name' must be a non-empty str, got {name!r}")


def _spec(t: ir.Type) -> str:
    t = ir.RankedTensorType(t)
    return f"{dtypes.from_ir_type(t.element_type)}{format_shape(t.shape)}"


def _out_types(op: str, callee: str, out_shapes, out_dtypes) -> Optional[List[ir.RankedTensorType]]:
    """``out_shapes``/``out_dtypes`` of :meth:`FunctionBuilder.call` as tensor types (None if
    not given).

    Raises
    ------
    BuildError
        For malformed shapes, unknown dtypes or counts that differ.
    """
    if out_shapes is None:
        if out_dtypes is not None:
            raise BuildError(f"{op}: '{callee}': out_dtypes without out_shapes")
        return None
    shapes = list(out_shapes)
    if not shapes or all(isinstance(d, (int, np.integer)) for d in shapes):
        shapes = [shapes]  # one shape
    if out_dtypes is None:
        out_dtypes = "float32"
    dts = [out_dtypes] * len(shapes) if isinstance(out_dtypes, str) else list(out_dtypes)
    if len(dts) != len(shapes):
        raise BuildError(f"{op}: '{callee}': {len(shapes)} out_shapes but {len(dts)} out_dtypes")
    return [ir.RankedTensorType.get(list(check_shape(op, "out_shapes", s)), dtypes.to_ir_type(d))
            for s, d in zip(shapes, dts)]
