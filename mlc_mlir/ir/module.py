"""``Module``: a set of graph and primitive functions (``func.func`` on tensors) plus parameters.

The counterpart of TVM's ``IRModule``. A Module owns its MLIR context and ``builtin.module``;
passes and schedules return new Modules (``clone`` copies the IR, weights stay shared as
``dense_resource`` blobs of the context, so cloning never copies 100 MB of weights).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._mlir import arith_d, func_d, ir
from ..errors import IRError, MlcError, format_shape
from . import dtypes
from .constants import Blobs, constant_array
from .context import new_context
from .symbolic import Dim, is_static, parse, symbol

#: Function argument attribute that names the argument (``{mlc.arg_name = "x"}``).
ARG_NAME_ATTR = "mlc.arg_name"
#: Function argument attribute marking a weight passed at call time (Relax-style parameter).
PARAM_ATTR = "mlc.param"
#: Op attribute carrying the stable op name (the TensorIR block name).
OP_NAME_ATTR = "mlc.name"
#: Attribute of a ``linalg.conv_2d_nhwc_hwcf`` op: the algorithm chosen for it (a tuning
#: record's decision), which the ``layout`` stage's rewrites follow instead of the target's
#: default rule: :data:`CONV_DIRECT`, :data:`CONV_IM2COL`, or the Winograd output tile 2 or 4.
CONV_ALGORITHM_ATTR = "mlc.conv_algorithm"
#: Values of :data:`CONV_ALGORITHM_ATTR` besides the Winograd tiles.
CONV_DIRECT, CONV_IM2COL = 0, 1
#: Result attribute marking a run-time check (the message of its failure, with ``{value}``): an
#: int64 result whose elements hold ``CHECK_PASSED`` where the check holds, else the offending
#: value; the runtime drops it from the results and raises ``ExecutionError`` when one failed.
CHECK_ATTR = "mlc.check"
#: What a check result holds when its check passed (INT64_MIN).
CHECK_PASSED = -(1 << 63)
#: Argument/result attribute: the symbolic shape of a dynamic tensor (``["batch", "seq", "128"]``).
SHAPE_ATTR = "mlc.shape"
#: Function attribute: bounds of its symbolic sizes (``{seq = array<i64: 1, 2048>}``, max -1:
#: unbounded).
DIMS_ATTR = "mlc.dims"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one function argument or result.

    ``shape`` is a tuple of ints and, for dynamic dims, :class:`~mlc_mlir.ir.symbolic.SymDim`
    (``(batch, seq, 128)``); ``dtype`` a name from :data:`mlc_mlir.ir.dtypes.ALL_DTYPES`;
    ``is_param`` marks a weight (see ``Module.params``); ``check`` marks a run-time check result
    (:data:`CHECK_ATTR`: its failure message).
    """

    name: str
    shape: Tuple[Dim, ...]
    dtype: str
    is_param: bool = False
    check: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{format_shape(self.shape)}"


@dataclasses.dataclass(frozen=True)
class FunctionSignature:
    """Arguments and results of a public function, read from its ``func.func`` type."""

    name: str
    args: Tuple[TensorSpec, ...]
    results: Tuple[TensorSpec, ...]
    #: bounds ``(min, max)`` of each symbolic size (``max`` None: unbounded)
    dims: Mapping[str, Tuple[int, Optional[int]]] = dataclasses.field(default_factory=dict)

    @property
    def is_dynamic(self) -> bool:
        """True when an argument or result has a symbolic size."""
        return not all(is_static(s.shape) for s in self.args + self.results)


def tensor_spec(t: ir.Type, name: str, is_param: bool = False, where: str = "",
                symbolic: Optional[Sequence[str]] = None, is_result: bool = False) -> TensorSpec:
    """TensorSpec of a ranked tensor or memref type.

    ``where`` (e.g. ``"function 'f'"``) prefixes error messages. ``symbolic`` is the text of each
    dim (the ``mlc.shape`` attribute) and names the dynamic dims; without it a dynamic dim of an
    argument is its own symbol ``<name>.shape[i]``.

    Raises
    ------
    IRError
        For non-shaped types (``function 'f': argument 'arg0' has type i32; expected a ranked
        tensor or memref``), unranked shapes, a dynamic result dim with no ``mlc.shape`` (its
        size could not be computed before the call), and element types with no dtype.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
        for cls in (ir.RankedTensorType, ir.MemRefType):
            try:
                t = cls(t)
                break
            except ValueError:
                continue
        else:
            raise IRError(f"{prefix}'{name}' has type {t}; expected a ranked tensor or memref")
    shape: List[Dim] = list(t.shape)
    if not t.has_static_shape:
        if symbolic is None and is_result:
            raise IRError(f"{prefix}'{name}' has type {t} with a dynamic shape and no '{SHAPE_ATTR}' "
                          "attribute giving its sizes in terms of the arguments'")
        for i in range(t.rank):
            if t.is_dynamic_dim(i):
                shape[i] = parse(symbolic[i]) if symbolic is not None else symbol(f"{name}.shape[{i}]")
    try:
        dtype = dtypes.from_ir_type(t.element_type)
    except MlcError as e:
        raise IRError(f"{prefix}'{name}' has type {t}: {e}") from None
    return TensorSpec(name, tuple(shape), dtype, is_param)


def _symbolic_shape(attrs: ir.DictAttr) -> Optional[List[str]]:
    """The dims' text of an ``mlc.shape`` argument/result attribute, or None."""
    if SHAPE_ATTR not in attrs:
        return None
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(attrs[SHAPE_ATTR])]


class Module:
    """A verified ``builtin.module`` of ``func.func`` graph/primitive functions.

    Parameters
    ----------
    ir_module : mlir.ir.Module
        The MLIR module; the Module takes ownership (its context must stay alive: pass ``context``).
    context : mlir.ir.Context
        The context that owns ``ir_module``.
    params : mapping of str to numpy.ndarray, optional
        Values of parameter arguments (``{mlc.param = "w0"}``), used when an Executable is called
        without them and by :meth:`bind_params`.
    """

    def __init__(self, ir_module: ir.Module, context: ir.Context,
                 params: Optional[Mapping[str, np.ndarray]] = None):
        self._module = ir_module
        self._context = context
        self.params: Dict[str, np.ndarray] = dict(params or {})
        self._keepalive: Blobs = Blobs()  # numpy buffers behind dense_resource blobs

    # ----------------------------------------------------------------- construction
    @classmethod
    def parse(cls, text: str, params: Optional[Mapping[str, np.ndarray]] = None) -> "Module":
        """Parse MLIR text (e.g. written by ``mlir-opt`` or by hand) into a verified Module;
        the weights of its resource section are readable at compile time
        (:meth:`constant_value`, :meth:`~mlc_mlir.ir.constants.Blobs.add_parsed`) as a built
        module's are.

        Raises
        ------
        IRError
            With MLIR's diagnostics (line:column) when the text does not parse or verify.
        """
        keepalive = Blobs()
        ctx = new_context(keepalive)
        with ctx, ir.Location.unknown():
            try:
                mod = ir.Module.parse(text)
            except ir.MLIRError as e:
                raise IRError(f"Module.parse: the text is not valid MLIR:\n{_diagnostics(e)}") from None
        keepalive.add_parsed(text)
        out = cls(mod, ctx, params)
        out._keepalive = keepalive
        out.verify()
        return out

    def clone(self) -> "Module":
        """A deep copy of the IR in the same context (weights shared, not copied)."""
        with self._context, ir.Location.unknown():
            new = ir.Module.create()
            attrs = self._module.operation.attributes  # iterates the names
            for name in list(attrs):
                new.operation.attributes[name] = attrs[name]
            with ir.InsertionPoint(new.body):
                for op in self._module.body.operations:
                    op.clone()
        out = Module(new, self._context, self.params)
        out._keepalive = self._keepalive
        return out

    # ----------------------------------------------------------------- access
    @property
    def context(self) -> ir.Context:
        """The MLIR context owning this module."""
        return self._context

    @property
    def ir_module(self) -> ir.Module:
        """The underlying ``mlir.ir.Module`` (mutating it in place bypasses verification)."""
        return self._module

    @property
    def operation(self) -> ir.Operation:
        """The ``builtin.module`` operation."""
        return self._module.operation

    def func_ops(self) -> List[func_d.FuncOp]:
        """All ``func.func`` ops of the module, in order."""
        return [op for op in self._module.body.operations if isinstance(op, func_d.FuncOp)]

    def defined_functions(self, names: Optional[Iterable[str]] = None) -> List[func_d.FuncOp]:
        """The ``func.func`` ops with a body (not external declarations), in order; only those
        whose symbol is in ``names`` when given (the ``functions`` scope of a graph pass)."""
        keep = None if names is None else set(names)
        return [f for f in self.func_ops()
                if not f.is_external and (keep is None or f.sym_name.value in keep)]

    def get_function(self, name: str) -> func_d.FuncOp:
        """The ``func.func`` named ``name``.

        Raises
        ------
        IRError
            If there is none; the message lists the functions there are.
        """
        # MLIR's symbol table (built in C++): a Python scan of the module's ops per lookup made
        # the lookups of a pass that visits every function quadratic in their number
        try:
            op = ir.SymbolTable(self._module.operation)[name]
        except KeyError:
            op = None
        if not isinstance(op, func_d.FuncOp):
            raise IRError(f"module: no function named '{name}'; functions: {self.function_names()}")
        return op

    def function_names(self, public_only: bool = False) -> List[str]:
        """Names of the functions (only the public ones with ``public_only``)."""
        out = []
        for f in self.func_ops():
            vis = f.attributes["sym_visibility"].value if "sym_visibility" in f.attributes else "public"
            if f.is_external or (public_only and vis != "public"):
                continue
            out.append(f.sym_name.value)
        return out

    def signature(self, name: str) -> FunctionSignature:
        """Arguments and results of function ``name`` (names from ``mlc.arg_name`` or ``argN``).

        Raises
        ------
        IRError
            If there is no such function, or an argument or result is not a static-shaped
            tensor of a supported dtype (naming the function, the argument and the type).
        """
        f = self.get_function(name)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        args = []
        arg_attrs = f.arg_attrs if "arg_attrs" in f.attributes else None
        for i, t in enumerate(ftype.inputs):
            arg_name, is_param, sym = f"arg{i}", False, None
            if arg_attrs is not None:
                d = ir.DictAttr(arg_attrs[i])
                if ARG_NAME_ATTR in d:
                    arg_name = ir.StringAttr(d[ARG_NAME_ATTR]).value
                if PARAM_ATTR in d:
                    is_param = True
                sym = _symbolic_shape(d)
            args.append(tensor_spec(t, arg_name, is_param, f"function '{name}'", sym))
        res_attrs = list(ir.ArrayAttr(f.attributes["res_attrs"])) if "res_attrs" in f.attributes else None
        results = [tensor_spec(t, f"result{i}", where=f"function '{name}'", is_result=True,
                               symbolic=_symbolic_shape(ir.DictAttr(res_attrs[i])) if res_attrs else None)
                   for i, t in enumerate(ftype.results)]
        for i, r in enumerate(results):
            d = ir.DictAttr(res_attrs[i]) if res_attrs is not None else None
            if d is not None and CHECK_ATTR in d:
                if r.dtype != "int64":
                    raise IRError(f"function '{name}': check result {i} has dtype {r.dtype}; "
                                  "expected int64")
                results[i] = dataclasses.replace(r, name=f"check{i}",
                                                 check=ir.StringAttr(d[CHECK_ATTR]).value)
        checks = [r.check is not None for r in results]
        if checks != sorted(checks):
            raise IRError(f"function '{name}': check results must follow the other results")
        dims = {}
        if DIMS_ATTR in f.attributes:
            for a in ir.DictAttr(f.attributes[DIMS_ATTR]):
                lo, hi = list(ir.DenseI64ArrayAttr(a.attr))
                dims[a.name] = (lo, None if hi < 0 else hi)
        return FunctionSignature(name, tuple(args), tuple(results), dims)

    # ----------------------------------------------------------------- checks and printing
    def verify(self) -> "Module":
        """Run the MLIR verifier; returns self.

        Raises
        ------
        IRError
            With the verifier's diagnostics.
        """
        with self._context:
            try:
                self._module.operation.verify()
            except ir.MLIRError as e:
                raise IRError(f"module failed to verify:\n{_diagnostics(e)}") from None
        return self

    def to_text(self, elide_weights: bool = False) -> str:
        """MLIR text; with ``elide_weights`` resource blobs over 64 bytes print as ``__elided__``."""
        if elide_weights:
            return self._module.operation.get_asm(large_elements_limit=16, large_resource_limit=64)
        return str(self._module)

    def __str__(self) -> str:
        return self.to_text()

    def constant_value(self, attr: ir.Attribute) -> Optional[np.ndarray]:
        """The numpy value of an elements attribute of this module's IR (a ``dense<...>`` or a
        ``dense_resource`` blob created by this module's builders and passes or read from the
        text it was parsed from, shape and dtype of ``attr.type``), or ``None`` when its bytes
        are not known here (an element type with no numpy dtype, a blob whose size does not
        match its type). MLIR's Python API has no reader for a blob's bytes."""
        return constant_array(attr, self._keepalive)

    @property
    def derived_weights(self) -> dict:
        """The store of the weights computed from this module's
        (:func:`~mlc_mlir.ir.constants.derived_array`: a transposed or a concatenated weight),
        shared by its clones. An importer sets it to the dict it was given, so the modules of
        the steps of one model (a prefill and a decode) hold one array per derived weight."""
        return self._keepalive.derived

    @derived_weights.setter
    def derived_weights(self, store: dict) -> None:
        self._keepalive.derived = store

    def __repr__(self) -> str:
        return f"<mlc.Module functions={self.function_names()} params={sorted(self.params)}>"

    # ----------------------------------------------------------------- editing
    def extract(self, name: str) -> "Module":
        """A new Module holding function ``name`` and the functions it calls (transitively),
        with the parameter values its arguments name (TVM ``IRModule.from_expr(mod[name])``).

        The result shares this module's context and weights (no copy), like :meth:`clone`; tune
        or schedule it on its own, then put it back with :meth:`update_func`.

        Raises
        ------
        IRError
            If there is no function ``name`` (lists the functions there are).
        """
        keep = self.callees(self.get_function(name))
        out = self.clone()
        for f in out.func_ops():
            if f.sym_name.value not in keep:
                f.operation.erase()
        fn = out.get_function(name)
        attrs = [ir.DictAttr(a) for a in fn.arg_attrs] if "arg_attrs" in fn.attributes else []
        used = {ir.StringAttr(d[ARG_NAME_ATTR]).value for d in attrs
                if PARAM_ATTR in d and ARG_NAME_ATTR in d}
        out.params = {k: v for k, v in self.params.items() if k in used}
        return out.verify()

    def update_func(self, name: str, new) -> "Module":
        """A new Module in which function ``name`` is replaced by ``new`` (TVM
        ``IRModule.update_func``), e.g. the tuned version of one function.

        Parameters
        ----------
        name : str
            A function of this module.
        new : Module or func.func op
            A Module holding a function named ``name`` (or exactly one public function, e.g. an
            extracted and scheduled ``main``), or a ``func.func`` op. Functions it calls that
            this module lacks are copied along. A Module of another context is moved through its
            printed text (weights included); one of this context (``extract``/``Schedule.mod``)
            is cloned op by op.

        Returns
        -------
        Module
            The edited copy (this module is unchanged); its params are this module's plus the
            new function's.

        Raises
        ------
        IRError
            If ``name`` is not a function here, ``new`` has no matching function, its type
            differs from the old function's (``update_func: 'linear0' has type (tensor<1x784xf32>)
            -> tensor<1x128xf32>; the new function has ...``), or a callee it brings has the name of
            a different function here.
        """
        old = self.get_function(name)
        params: Dict[str, np.ndarray] = {}
        if isinstance(new, Module):
            params = dict(new.params)
            if new.context is not self._context:
                with self._context:
                    try:
                        moved = ir.Module.parse(new.to_text())
                    except ir.MLIRError as e:
                        raise IRError(f"update_func: the new module does not parse here:\n{_diagnostics(e)}") from None
                new = Module(moved, self._context, params)
            src = new._pick(name)
            others = {f.sym_name.value: f for f in new.func_ops()}
        elif isinstance(new, func_d.FuncOp) or getattr(getattr(new, "operation", None), "name", "") == "func.func":
            src = new if isinstance(new, func_d.FuncOp) else func_d.FuncOp(new.operation)
            if src.context is not self._context:
                raise IRError("update_func: the func.func op belongs to another context; pass its Module")
            parent = src.operation.parent
            others = {f.sym_name.value: f for f in (parent.regions[0].blocks[0].operations if parent else [])
                      if isinstance(f, func_d.FuncOp)}
        else:
            raise IRError(f"update_func: argument 'new' is {type(new).__name__}; expected mlc.Module or func.func")
        if str(src.type) != str(old.type):
            raise IRError(f"update_func: '{name}' has type {old.type}; the new function has {src.type}")
        out = self.clone()
        mine = {f.sym_name.value: f for f in out.func_ops()}
        with self._context, ir.Location.unknown():
            target = mine[name]
            with ir.InsertionPoint(target):
                fresh = src.operation.clone()
            fresh.attributes["sym_name"] = ir.StringAttr.get(name)
            for attr in ("arg_attrs", "sym_visibility"):  # argument names/params stay the old ones
                if attr in target.attributes:
                    fresh.attributes[attr] = target.attributes[attr]
            target.operation.erase()
            src_name = src.sym_name.value
            for callee in sorted(self._callee_names(src) - {src_name}):
                if callee in mine and callee != name:
                    if str(mine[callee]) != str(others[callee]):
                        raise IRError(f"update_func: the new '{name}' calls '{callee}', which differs from "
                                      f"this module's '{callee}'")
                    continue
                if callee in others:
                    with ir.InsertionPoint(out._module.body):
                        others[callee].operation.clone()
        out.params = {**self.params, **params}
        return out.verify()

    def _pick(self, name: str) -> func_d.FuncOp:
        """Function ``name``, else the only public function."""
        names = self.function_names()
        if name in names:
            return self.get_function(name)
        public = self.function_names(public_only=True)
        if len(public) == 1:
            return self.get_function(public[0])
        raise IRError(f"update_func: the new module has no function '{name}' and {len(public)} public "
                      f"functions {public}; expected one")

    @staticmethod
    def _callee_names(f: func_d.FuncOp) -> set:
        names = set()

        def walk(op):
            if op.operation.name == "func.call":
                names.add(ir.FlatSymbolRefAttr(op.operation.attributes["callee"]).value)
            return ir.WalkResult.ADVANCE

        f.operation.walk(walk)
        return names

    def callees(self, f: func_d.FuncOp) -> set:
        """``f``'s name and the names of the functions it calls, transitively (``func.call``
        callees; names not defined in the module are skipped)."""
        funcs = {g.sym_name.value: g for g in self.func_ops()}
        seen, todo = set(), [f.sym_name.value]
        while todo:
            n = todo.pop()
            if n in seen or n not in funcs:
                continue
            seen.add(n)
            todo.extend(self._callee_names(funcs[n]))
        return seen

    # ----------------------------------------------------------------- parameters
    def bind_params(self, names: Optional[Sequence[str]] = None) -> "Module":
        """Replace parameter arguments by constants (Relax's ``BindParams``).

        Parameters
        ----------
        names : sequence of str, optional
            Parameters to bind (default: all of ``self.params``).

        Returns
        -------
        Module
            A new module whose functions no longer take those arguments; their values become
            ``arith.constant dense_resource<...>`` ops.

        Raises
        ------
        IRError
            If a name has no value in ``self.params`` or the value's shape/dtype differs from the
            argument's type.
        """
        names = sorted(self.params) if names is None else list(names)
        missing = [n for n in names if n not in self.params]
        if missing:
            raise IRError(f"bind_params: no value for parameters {missing}; have {sorted(self.params)}")
        out = self.clone()
        _bind_param_arguments(out, {n: self.params[n] for n in names})
        out.params = {k: v for k, v in self.params.items() if k not in names}
        return out.verify()


def _erase_arguments(mod: Module, erase) -> set:
    """In place: erase each function argument ``i`` for which ``erase(sig, spec, block, i)`` is
    true (the callback first rewires the argument's uses if it has any); returns the names of
    the arguments kept."""
    kept = set()
    with mod.context, ir.Location.unknown():
        for f in mod.func_ops():
            if f.is_external or "arg_attrs" not in f.attributes:
                continue
            sig = mod.signature(f.sym_name.value)
            block = f.regions[0].blocks[0]
            keep = []
            for i in reversed(range(len(sig.args))):
                if erase(sig, sig.args[i], block, i):
                    block.erase_argument(i)
                else:
                    keep.append(i)
                    kept.add(sig.args[i].name)
            keep.reverse()
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                [ftype.inputs[i] for i in keep], list(ftype.results)))
            f.attributes["arg_attrs"] = ir.ArrayAttr.get([f.arg_attrs[i] for i in keep])
    return kept


def _bind_param_arguments(mod: Module, values: Mapping[str, np.ndarray]) -> None:
    """In place: replace each ``{mlc.param}`` argument named in ``values`` by a constant."""
    def bind(sig, spec, block, i) -> bool:
        if not (spec.is_param and spec.name in values):
            return False
        value = values[spec.name]
        if tuple(value.shape) != spec.shape or dtypes.canonical_dtype(value.dtype) != spec.dtype:
            raise IRError(f"bind_params: parameter '{spec.name}' is {value.dtype}"
                          f"{format_shape(value.shape)}; expected {spec.dtype}"
                          f"{format_shape(spec.shape)}")
        attr = mod._keepalive.constant(value, f"{sig.name}_{spec.name}")
        with ir.InsertionPoint.at_block_begin(block):
            cst = arith_d.ConstantOp(block.arguments[i].type, attr)
            cst.operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(spec.name)
        block.arguments[i].replace_all_uses_with(cst.result)
        return True

    _erase_arguments(mod, bind)


def drop_unused_params(mod: Module) -> Module:
    """In place: erase the ``{mlc.param}`` arguments nothing reads (a weight an importer
    replaced, e.g. by its transpose) and their values; returns ``mod``."""
    used = _erase_arguments(mod, lambda sig, spec, block, i: spec.is_param and not list(block.arguments[i].uses))
    mod.params = {k: v for k, v in mod.params.items() if k in used}
    return mod


def _diagnostics(e: "ir.MLIRError") -> str:
    lines = []
    for d in getattr(e, "error_diagnostics", []) or []:
        lines.append(f"  {d.location}: {d.message}")
        for n in d.notes:
            lines.append(f"    note: {n.location}: {n.message}")
    return "\n".join(lines) or f"  {e}"


def diagnostics(e: "ir.MLIRError") -> str:
    """Format an ``MLIRError``'s diagnostics as indented ``location: message`` lines."""
    return _diagnostics(e)
