"""PyTorch frontend: ``from_torch`` (``torch.export`` -> core ATen -> builder ops); the fx path
(``from_fx``) is :mod:`.torch_fx`.

``from_torch`` exports the model with ``torch.export.export(model, args).run_decompositions()``
(the core ATen opset; :data:`KEPT_OPS` are kept whole: :func:`decomposition_table`), then walks the graph once: parameters and buffers become constants
(named by their state_dict keys; as ``torch.compile``'s freezing and onnxruntime treat weights,
so that constant folding, filter layout folding, Winograd and weight packing apply), or with
``keep_params=True`` module params (``f.param``, arguments filled at call time), user inputs
become arguments named like the model's ``forward`` parameters, and every ``call_function`` node
goes through the converter registry of :mod:`.torch_converters`. Before building anything, every
node is checked: a model with unsupported ops raises one ``BuildError`` listing each op, its count
and its first source location.

``torch`` is an optional dependency (``pip install mlc-mlir[torch]``), imported where it is used.

Source: ``torch.export`` / core ATen IR; TVM Relax ``frontend/torch/exported_program_translator.py``
(``from_exported_program``).
"""

from __future__ import annotations

import functools
import operator
import re
from collections import Counter
from typing import Dict, List, Optional

import numpy as np

from .. import ops
from ..builder import GraphBuilder, Tensor
from ..errors import BuildError
from ..graph.dce import DeadCodeElimination
from ..ir import Module
from ..ir.constants import derived_array
from ..ir.module import drop_unused_params
from .torch_converters import CONVERTERS, REFUSED, TORCH_DTYPES, register_converter  # noqa: F401
# the converter modules register themselves: creation, math, nn, shape, decoder LLMs, size arithmetic
from . import (torch_converters_create, torch_converters_llm, torch_converters_math,  # noqa: F401
               torch_converters_nn, torch_converters_shape, torch_symbolic)


class ConvertContext:
    """What a converter sees besides its node and arguments.

    Attributes
    ----------
    fn : FunctionBuilder
        The function being built (``fn.param`` / ``fn.arg``).
    kwargs : dict
        The current node's keyword arguments, fx nodes replaced by their values.
    derived : dict
        Weights computed from the model's at import (a transposed ``nn.Linear`` weight), by
        name and source buffer (:meth:`derived_weight`); a dict given to several imports of one
        model makes them share one array per derived weight.
    """

    def __init__(self, fn, derived: Optional[Dict] = None):
        self.fn = fn
        self.derived: Dict = {} if derived is None else derived
        self.kwargs: Dict[str, object] = {}
        self.values: Dict[str, object] = {}
        self.folded: Dict[str, object] = {}  # node name -> torch.Tensor computed at import time
        self.state_names: Dict[str, str] = {}  # buffer placeholder -> state_dict key
        self._params: Dict[str, Tensor] = {}
        self._param_values: Dict[str, np.ndarray] = {}

    def param(self, name: str, value) -> Tensor:
        """The module param ``name`` holding ``value`` (a torch tensor or numpy array), created on
        first use."""
        if name not in self._params:
            arr = value if isinstance(value, np.ndarray) else _to_numpy(value)
            self._params[name] = self.fn.param(name, arr)
            self._param_values[name] = arr
        return self._params[name]

    def derived_weight(self, name: str, source: np.ndarray, make) -> np.ndarray:
        """``make(source)``, computed once per ``name`` and source buffer in
        :attr:`derived` (imports that share the dict share the array: one copy in memory, which
        the JIT links into each compiled step, :mod:`mlc_mlir.pipeline.jit_weights`)."""
        return derived_array(self.derived, name, (source,), make)

    def param_of(self, x: Tensor):
        """``(name, numpy value)`` when ``x`` is a module param made by :meth:`param`, else None."""
        for name, t in self._params.items():
            if t.value == x.value:
                return name, self._param_values[name]
        return None

    def lookup(self, a):
        """``a`` with fx nodes replaced by their converted values (recursively in lists/tuples)."""
        if hasattr(a, "op") and hasattr(a, "name") and hasattr(a, "target"):  # an fx.Node
            if a.name not in self.values and a.name in self.folded:
                self.values[a.name] = self._materialize(a.name)
            return self.values[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self.lookup(e) for e in a)
        if isinstance(a, dict):
            return {k: self.lookup(v) for k, v in a.items()}
        return a


    def _materialize(self, name: str):
        """A folded value as a builder operand: a buffer as its param, a 0-d tensor as a Python
        scalar, another tensor as a constant (bool as int8 0/1, the builder's mask dtype)."""
        t = self.folded[name]
        if not hasattr(t, "detach"):
            return t
        if name in self.state_names:
            return self.param(self.state_names[name], t)
        if t.dim() == 0:
            return t.item() if str(t.dtype) != "torch.bool" else int(t.item())
        arr = _to_numpy(t)
        return ops.constant(arr.astype(np.int8) if arr.dtype == np.bool_ else arr)


#: Why an op tagged ``torch.Tag.nondeterministic_seeded`` (``bernoulli``, ``normal``, the
#: dropout masks of ``training=True``) is refused when no converter takes it.
RANDOM_REASON = ("draws random numbers (a compiled graph has no RNG state): call model.eval() or "
                 "pass the random tensor as an input")


def _draws_random(node) -> bool:
    """Whether ``node`` calls an ATen op tagged ``nondeterministic_seeded`` (a random draw)."""
    return any(getattr(t, "name", "") == "nondeterministic_seeded" for t in getattr(node.target, "tags", ()))


def _foldable(ep) -> set:
    """Names of the nodes computable at import time: buffers, constant tensors, and every node
    whose inputs all are foldable (``arange``, mask arithmetic on buffers); parameters never are,
    nor random draws (folding one would freeze a single sample into the compiled graph)."""
    kinds = {s.arg.name: s.kind.name for s in ep.graph_signature.input_specs}
    out = set()
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder":
            if kinds.get(node.name) in ("BUFFER", "CONSTANT_TENSOR"):
                out.add(node.name)
        elif node.op == "call_function" and str(node.target) not in REFUSED and \
                not _draws_random(node) and all(n.name in out for n in node.all_input_nodes):
            out.add(node.name)
    return out


def _to_numpy(t) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().contiguous().numpy())


def _location(node) -> str:
    """The first user source line of ``node`` (from ``meta['stack_trace']``) and its innermost
    module (``meta['nn_module_stack']``): ``model.py:12 in forward (module 'blocks.0': Linear)``."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', node.meta.get("stack_trace") or "")
    user = [f for f in frames if "site-packages/torch" not in f[0] and "/torch/" not in f[0]]
    where = "unknown location"
    if user or frames:
        path, line, func = (user or frames)[-1]
        where = f"{path}:{line} in {func}"
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, typ = list(stack.values())[-1]
        typ = typ.__name__ if isinstance(typ, type) else str(typ).rsplit(".", 1)[-1]
        where += f" (module '{path}': {typ})"
    return where


def _report_unsupported(api: str, missing: Counter, first: Dict[str, str],
                        reasons: Dict[str, str]) -> None:
    """Raise one BuildError listing every unsupported op (count, first location, and the reason
    from ``reasons`` where it has one), if any."""
    if missing:
        lines = [f"  {op} x{n}, first at {first[op]}" + (f": {reasons[op]}" if op in reasons else "")
                 for op, n in sorted(missing.items())]
        raise BuildError(f"{api}: {len(missing)} unsupported op(s) (register a converter with "
                         f"mlc_mlir.frontends.torch.register_converter):\n" + "\n".join(lines))


def _input_shape(api: str, what: str, shape, names: Dict[str, str]) -> List:
    """An input's shape for ``f.arg``: ints, and the text of each symbolic dim (a
    ``torch.SymInt``: its sympy expression, symbols renamed by ``names``, e.g. ``s31 -> seq``).

    Raises
    ------
    BuildError
        For a symbolic dim whose expression is not a polynomial of symbols (``floor(s0/2)``).
    """
    out = []
    for d in shape:
        expr = getattr(getattr(d, "node", None), "expr", None)
        if expr is None or expr.is_number:
            out.append(int(d) if expr is None else int(expr))
            continue
        text = str(expr.subs({sym: sym.func(names[str(sym)]) for sym in expr.free_symbols
                              if str(sym) in names}))
        if not all(c.isalnum() or c in "_*+- ()" for c in text):
            raise BuildError(f"{api}: {what} has the symbolic dim {text!r}; expected a polynomial of "
                             "torch.export Dims (sums and products)")
        out.append(text)
    return out


def _dim_names(ep, args, dynamic_shapes) -> Dict[str, str]:
    """The names of ``torch.export.Dim`` s by torch's symbol names (``{"s31": "batch"}``), read
    where ``dynamic_shapes`` puts a Dim on an input dim that is a plain symbol."""
    names: Dict[str, str] = {}
    if dynamic_shapes is None:
        return names
    specs = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else list(dynamic_shapes)
    inputs = [n for n in ep.graph.nodes if n.op == "placeholder" and
              next(s for s in ep.graph_signature.input_specs if s.arg.name == n.name).kind.name == "USER_INPUT"]
    for node, spec in zip(inputs, specs):
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        shape = node.meta["val"].shape
        for axis, dim in dims:
            name = getattr(dim, "__name__", None)
            if not name or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                continue   # a static dim, or a spec of several inputs (a *args tuple)
            expr = getattr(getattr(shape[axis], "node", None), "expr", None)
            if expr is not None and expr.is_Symbol and name.isidentifier():
                names[str(expr)] = name
    return names


def _bounds(ep, names: Dict[str, str]) -> Dict[str, tuple]:
    """``{dim name: (min, max or None)}`` of the exported program's range constraints (torch's
    ``int_oo`` reads as finite to sympy: a bound is a size only below 2**63)."""
    out = {}
    for sym, vr in ep.range_constraints.items():
        lo = int(vr.lower) if vr.lower.is_finite and bool(abs(vr.lower) < 2 ** 63) else 0
        hi = int(vr.upper) if vr.upper.is_finite and bool(vr.upper < 2 ** 63) else None
        out[names.get(str(sym), str(sym))] = (max(lo, 0), hi)
    return out


def _convert(ctx: ConvertContext, node, key: str, converter, args, kwargs):
    """Run one converter; a BuildError is re-raised naming the node and its source location."""
    ctx.kwargs = kwargs
    try:
        return converter(ctx, node, list(args))
    except BuildError as e:
        raise BuildError(f"{key} (node '{node.name}', {_location(node)}): {e}") from e


def _getitem(node, seq, i):
    v = seq[i]
    if v is None:
        raise BuildError(f"getitem (node '{node.name}'): output {i} of '{node.args[0].name}' is not "
                         "supported (only the primary output of multi-output ops is converted)")
    return v


#: ATen ops :func:`decomposition_table` keeps whole, with why: a converter emits an op the
#: schedule rules recognize where torch's decomposition emits a pattern they do not.
KEPT_OPS = {"aten.mv.default": "decomposed, a broadcast multiply (materialized) and a sum; kept, a "
                               "dense at M = 1 that the GEMV rule streams row by row"}


def decomposition_table() -> dict:
    """``torch.export.default_decompositions()`` (the Core ATen decompositions that
    ``run_decompositions()`` applies) without the ops of :data:`KEPT_OPS`, as a new dict (the
    caller may change it) of the table built once per process: materializing torch's table
    costs about 0.1 CPU s, a third of a small model's ``run_decompositions``."""
    return dict(_decompositions())


@functools.lru_cache(maxsize=1)
def _decompositions() -> tuple:
    """The ``(op, decomposition)`` pairs of :func:`decomposition_table`."""
    import torch

    table = torch.export.default_decompositions()
    for name in KEPT_OPS:
        base, overload = name[len("aten."):].rsplit(".", 1)
        table.pop(getattr(getattr(torch.ops.aten, base), overload))
    return tuple(table.materialize().items())


def from_torch(model, example_args, dynamic_shapes=None, keep_params: bool = False,
               derived_weights: Optional[Dict] = None) -> Module:
    """Import a ``torch.nn.Module`` through ``torch.export`` and core ATen.

    Parameters
    ----------
    model : torch.nn.Module
        Exported as it is: call ``model.eval()`` first for inference (training-mode batch norm
        is not converted).
    example_args : tuple of torch.Tensor (or one tensor)
        Example inputs; their shapes and dtypes become the function's argument types.
    dynamic_shapes : optional
        Passed to ``torch.export.export``: each ``torch.export.Dim`` stays a symbolic size of
        the function (named by the Dim, bounded by its ``min``/``max``; derived dims such as
        ``2 * seq`` stay expressions), so one compile serves every size in range.
    keep_params : bool
        False (default): weights and buffers are constants of the module, named by their
        state_dict keys. True: they are params, arguments of ``main`` held in ``Module.params``
        (to swap weights without recompiling; ``Module.bind_params`` binds them later).
    derived_weights : dict, optional
        Weights the import computes from the model's (transposed ``nn.Linear`` weights), kept
        in this dict: pass one dict to several imports of the same model (a prefill and a
        decode step) and they hold one array per derived weight instead of a copy each. The
        module keeps it as its :attr:`~mlc_mlir.ir.module.Module.derived_weights`, where the
        compile's weight rewrites (``merge-projections``) store theirs.

    Returns
    -------
    Module
        One function ``main(<params>..., <inputs>...)`` (no params by default); params named by
        state_dict keys (only those the graph uses; a 2-D weight read only transposed, as
        ``nn.Linear``'s, is the param ``<key>.T`` holding its transpose), inputs by the graph's
        placeholder names; results in ``forward``'s output order (nested outputs flattened).
        Bool inputs and results are int8 0/1 tensors (the builder's mask dtype: pass
        ``m.astype(np.int8)``). An input the model mutates in place (a static KV cache's
        ``index_copy_``) is an in/out argument: the call writes the caller's array
        (:meth:`~mlc_mlir.builder.graph_builder.FunctionBuilder.write_argument`).

    Raises
    ------
    BuildError
        Listing every unsupported ATen op with its count and first source location; for a
        symbolic dim that is not a polynomial of Dims, a non-tensor input, buffer mutation
        outputs, an input mutation other than slice writes, or a converter's failure (naming the
        node and its source line); when ``model`` is not an ``nn.Module`` or
        ``torch.export.export`` fails (the model does not run on ``example_args`` or cannot be
        traced), chained to torch's exception.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"from_torch: argument 'model' is {type(model).__name__}; expected a "
                         "torch.nn.Module")
    try:
        args = (example_args,) if isinstance(example_args, torch.Tensor) else tuple(example_args)
    except TypeError:
        raise BuildError(f"from_torch: argument 'example_args' is {type(example_args).__name__}; "
                         "expected a tensor or a tuple of tensors") from None
    try:
        with torch.no_grad():
            ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes).run_decompositions(
                decomposition_table())
    except Exception as e:  # noqa: BLE001  (torch.export's user errors have many types)
        first = (str(e).strip().splitlines() or [""])[0]
        raise BuildError(f"from_torch: torch.export.export failed ({type(e).__name__}: {first}); "
                         f"expected {type(model).__name__}.forward to run on example_args and to be "
                         "traceable by torch.export (the chained exception has torch's full report)") from e
    return from_exported_program(ep, _dim_names(ep, args, dynamic_shapes), keep_params=keep_params,
                                 derived_weights=derived_weights)


def from_exported_program(ep, dim_names: Optional[Dict[str, str]] = None, keep_params: bool = False,
                          derived_weights: Optional[Dict] = None) -> Module:
    """Convert a ``torch.export.ExportedProgram`` (already decomposed to the ops the registry
    knows, e.g. by ``run_decompositions()``); see :func:`from_torch`.

    Nodes that depend only on buffers and constants (attention-mask arithmetic, ``arange``,
    position ids) are computed with PyTorch at import time; their results enter the graph as
    constants, or as the buffer's param when a converter reads a buffer directly. Symbolic
    input dims become symbolic sizes named by ``dim_names`` (torch's symbol name -> name) or
    by torch's symbols, with the program's range constraints as bounds.
    ``keep_params`` and ``derived_weights`` as :func:`from_torch`.

    Raises
    ------
    BuildError
        As :func:`from_torch`.
    """
    from torch.fx.node import map_arg

    api = "from_torch"
    graph = ep.graph_module.graph
    foldable = _foldable(ep)
    missing, first, reasons = Counter(), {}, dict(REFUSED)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem and node.name not in foldable:
            key = str(node.target)
            if key not in CONVERTERS:
                missing[key] += 1
                first.setdefault(key, _location(node))
                if _draws_random(node):
                    reasons.setdefault(key, RANDOM_REASON)
    _report_unsupported(api, missing, first, reasons)

    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    out_kinds = [s.kind.name for s in ep.graph_signature.output_specs]
    for s in ep.graph_signature.output_specs:
        if s.kind.name not in ("USER_OUTPUT", "USER_INPUT_MUTATION"):
            raise BuildError(f"{api}: output '{s.arg.name}' is a {s.kind.name}; expected only user "
                             "outputs and input mutations (call model.eval() so batch norm does not "
                             "update its buffers)")
    state = dict(ep.state_dict)
    state.update(ep.constants)
    names = dict(dim_names or {})
    bb = GraphBuilder()
    with bb.function("main") as f:
        ctx = ConvertContext(f, derived_weights)
        outputs = []
        for name, (lo, hi) in _bounds(ep, names).items():
            f.dim(name, min=lo, max=hi)
        for node in graph.nodes:
            if node.op == "placeholder":
                spec = specs[node.name]
                kind = spec.kind.name
                if kind == "USER_INPUT":
                    val = node.meta.get("val")
                    if val is None or not hasattr(val, "shape"):
                        raise BuildError(f"{api}: input '{node.name}' is {val!r}; expected a tensor")
                    dtype = TORCH_DTYPES.get(str(val.dtype))
                    if dtype is None:
                        raise BuildError(f"{api}: input '{node.name}' has dtype {val.dtype}; expected one "
                                         f"of {sorted(TORCH_DTYPES)}")
                    ctx.values[node.name] = f.arg(
                        node.name, _input_shape(api, f"input '{node.name}'", val.shape, names),
                        "int8" if dtype == "bool" else dtype)  # masks are int8 0/1
                elif kind == "PARAMETER":
                    if node.users:  # unused state adds no argument
                        ctx.values[node.name] = ctx.param(spec.target, state[spec.target])
                elif kind in ("BUFFER", "CONSTANT_TENSOR"):  # a param once a converter needs it
                    ctx.folded[node.name] = state[spec.target]
                    if kind == "BUFFER":
                        ctx.state_names[node.name] = spec.target
                else:
                    raise BuildError(f"{api}: input '{node.name}' is a {kind}; expected a user input, "
                                     "parameter, buffer or constant tensor")
            elif node.op == "call_function" and node.name in foldable:
                fargs = map_arg((tuple(node.args), dict(node.kwargs)), lambda n: ctx.folded[n.name])
                ctx.folded[node.name] = node.target(*fargs[0], **fargs[1])
            elif node.op == "call_function":
                args, kwargs = ctx.lookup(tuple(node.args)), ctx.lookup(dict(node.kwargs))
                if node.target is operator.getitem:
                    ctx.values[node.name] = _getitem(node, *args)
                    continue
                key = str(node.target)
                empty = _empty_result(node)
                ctx.values[node.name] = empty if empty is not None else _convert(ctx, node, key, CONVERTERS[key],
                                                                                 args, kwargs)
            elif node.op == "output":
                outputs = _write_mutated_inputs(api, f, ctx, ep, list(node.args[0]), out_kinds)
            else:
                raise BuildError(f"{api}: node '{node.name}' has op {node.op!r}; expected placeholder, "
                                 "call_function or output in an exported graph")
        f.output(*outputs)
    # converters that read through an op (a cache write at its position, a transposed weight)
    # leave it dead: erased here so the params only it read are dropped too
    mod = drop_unused_params(DeadCodeElimination()(bb.finish()))
    mod = mod if keep_params else mod.bind_params()
    mod.derived_weights = ctx.derived
    return mod


def _empty_result(node) -> Optional[Tensor]:
    """A node whose (single) result has no elements computes nothing: its value is an empty
    constant of the result's shape and dtype (bool as int8); None for any other node."""
    val = node.meta.get("val")
    if not hasattr(val, "numel") or val.numel() != 0:
        return None
    dtype = TORCH_DTYPES.get(str(val.dtype))
    if dtype is None:
        return None
    return ops.constant(np.empty([int(d) for d in val.shape], "int8" if dtype == "bool" else dtype))


def _write_mutated_inputs(api: str, f, ctx: ConvertContext, ep, outs: list, kinds: List[str]) -> List[Tensor]:
    """The user outputs of the output node's ``outs`` (one per output spec); each input mutation
    (``x.index_copy_(...)`` on an input, a static KV cache's write) becomes an in/out argument
    written in place (:meth:`FunctionBuilder.write_argument`)."""
    user = []
    for spec, kind, o in zip(ep.graph_signature.output_specs, kinds, outs):
        if kind == "USER_OUTPUT":
            user.append(o)
            continue
        x, v = ctx.values[spec.target], ctx.lookup(o)
        try:
            f.write_argument(x, v)
        except BuildError as e:
            raise BuildError(f"{api}: input '{spec.target}' is mutated in place: {e}") from e
    return _flatten_outputs(api, ctx.lookup(user))


def _flatten_outputs(api: str, out) -> List[Tensor]:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten_outputs(api, o)]
    if not isinstance(out, Tensor):
        raise BuildError(f"{api}: an output is {type(out).__name__}; expected tensors")
    return [out]
