"""ONNX frontend: ``from_onnx(model) -> Module``.

Walks the graph in order, converting each node with the converter registered for its
``(domain, op_type)`` and the model's opset (:mod:`.onnx_registry`, converters in
:mod:`.onnx_ops`); initializers become params named by their initializer names;
``onnx.shape_inference`` fills shapes. Nodes whose inputs are all known at import time (Shape,
Constant, and arithmetic on them) are folded with ``onnx.reference``.

``onnx`` is an optional dependency (``pip install mlc-mlir[onnx]``) imported where it is used,
so ``import mlc_mlir`` (which exposes ``mlc.from_onnx``) does not import it.

Source: ONNX IR spec, TVM Relax ``relax.frontend.onnx.from_onnx``.
"""

from __future__ import annotations

import collections
import os
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Union

import numpy as np

from ..builder import GraphBuilder, Tensor
from ..errors import BuildError, MlcError
from ..ir import Module, symbolic
from ..ir.symbolic import SymDim
from .. import ops
from . import (  # noqa: F401  (register the converters)
    onnx_attention, onnx_control, onnx_index, onnx_loss, onnx_nn, onnx_ops, onnx_reduce, onnx_rnn, onnx_shape,
    onnx_signal, onnx_spatial, onnx_stateful,
)
from .onnx_registry import ONNX_DTYPES, OPSETS, NodeInputs, lookup

if TYPE_CHECKING:  # pragma: no cover
    import onnx

#: ONNX TensorProto element type -> our dtype. BOOL is carried as int8 (0/1): i1 tensors are
#: not lowerable (see :mod:`mlc_mlir.builder.math_ops`).
DTYPES = ONNX_DTYPES


#: Op types never evaluated with ``onnx.reference`` at import time even when their inputs are
#: known: their converters build the value (ConstantOfShape: a splat view, not a full array) or
#: it must not be fixed at import (random ops).
_NO_FOLD = {"Constant", "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike",
            "RandomUniformLike", "Bernoulli"}


def _load(model_or_path):
    try:
        import onnx
    except ImportError as e:
        raise BuildError("from_onnx: the 'onnx' package is not installed; expected it "
                         "(pip install 'mlc-mlir[onnx]')") from e
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        path = os.fsdecode(model_or_path)
        try:
            return onnx.load(path)
        except OSError as e:
            what = path if e.filename in (None, path) else f"{e.filename} (external data of {path})"
            raise BuildError(f"from_onnx: cannot read {what}: {e.strerror or e}; expected the path "
                             "of an ONNX model file (and its external data files next to it)") from e
        except Exception as e:  # noqa: BLE001  (protobuf's DecodeError and onnx's own errors)
            raise BuildError(f"from_onnx: {path} is not a valid ONNX model ({type(e).__name__}: "
                             f"{e}); expected a complete file written by onnx.save, with its external "
                             "data files next to it (a truncated or corrupt copy?)") from e
    raise BuildError(f"from_onnx: argument 'model_or_path' is {type(model_or_path).__name__}; "
                     f"expected an onnx.ModelProto or a path")


def _opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            if not OPSETS[0] <= imp.version <= OPSETS[1]:
                raise BuildError(f"from_onnx: the model's opset is {imp.version}; expected "
                                 f"{OPSETS[0]}..{OPSETS[1]}")
            return imp.version
    raise BuildError("from_onnx: the model imports no default-domain opset")


def _nodes(graph):
    """The nodes of ``graph`` and of its subgraphs (If branches, Loop/Scan bodies), depth first."""
    for n in graph.node:
        yield n
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _nodes(g)


def _check_supported(graph, opset: int) -> None:
    missing = collections.Counter(
        (n.domain or "") + ("::" if n.domain else "") + n.op_type for n in _nodes(graph)
        if lookup(n.domain or "", n.op_type, opset) is None)
    if missing:
        listed = ", ".join(f"{op} (x{c})" for op, c in sorted(missing.items()))
        raise BuildError(f"from_onnx: {len(missing)} unsupported op type(s) at opset {opset}: {listed}")


def check_model(model_or_path) -> None:
    """Check what :func:`from_onnx` checks before converting anything: the opset is in
    ``onnx_registry.OPSETS`` and every op type has a converter.

    Raises
    ------
    BuildError
        On an opset outside the range, or unsupported ops (one error listing every op type with
        its count).
    """
    model = _load(model_or_path)
    _check_supported(model.graph, _opset(model))


def _input_spec(vi, input_shapes: Dict[str, Sequence[int]]):
    import onnx
    tt = vi.type.tensor_type
    if tt.elem_type not in DTYPES:
        raise BuildError(f"from_onnx: input {vi.name!r} has element type "
                         f"{onnx.TensorProto.DataType.Name(tt.elem_type)}; expected one of "
                         f"{sorted(onnx.TensorProto.DataType.Name(t) for t in DTYPES)}")
    if vi.name in input_shapes:
        return tuple(int(d) for d in input_shapes[vi.name]), DTYPES[tt.elem_type]
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if not d.HasField("dim_value"):
            # a dim_param stays a symbolic size of that name (one name: one size); an unnamed
            # dynamic dim gets its own
            sym = d.dim_param
            if not sym.isidentifier():
                raise BuildError(f"from_onnx: input {vi.name!r} has a dynamic dim {i} "
                                 f"({sym or '?'!r}) whose dim_param is not a name; give it one or "
                                 f"pass input_shapes={{{vi.name!r}: (...)}}")
            dims.append(sym)
            continue
        dims.append(d.dim_value)
    return tuple(dims), DTYPES[tt.elem_type]


def _fold(node, values, opset: int):
    """Evaluate a node whose inputs are all numpy arrays with ``onnx.reference``; ``None`` when
    the reference kernel fails (the caller then converts the node like any other)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    outs = [f"o{k}" for k in range(len(node.output))]
    n = helper.make_node(node.op_type, names, outs, domain=node.domain)
    n.attribute.extend(node.attribute)
    feeds = {nm: v for nm, v in zip(names, values) if nm}
    try:
        ev = ReferenceEvaluator(helper.make_model(helper.make_graph([n], "fold", [], []),
                                                  opset_imports=[helper.make_opsetid("", opset)]))
        return [np.asarray(o) for o in ev.run(outs, feeds)]
    except Exception:  # noqa: BLE001 - a reference kernel's own limit, e.g. np.choose's 64
        return None     # choices in GatherElements (or a malformed node): the converter decides


#: Elementwise arithmetic on symbolic sizes (object arrays of ints and SymDims from Shape):
#: numpy applies the Python operators element by element. ONNX integer Div truncates; sizes
#: are non-negative, so it is floor division.
_SIZE_ARITH = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
               "Div": lambda a, b: a // b}


def _size_extremum(op: str, a, b):
    """``Min``/``Max`` of two sizes: decided by the function's dim bounds where a size carries
    its scope (:meth:`~mlc_mlir.builder.symbols.SymbolScope.minimum`), else a ``min``/``max``
    atom (:func:`~mlc_mlir.ir.symbolic.minimum`)."""
    scope = next((d.scope for d in (a, b) if isinstance(d, SymDim) and d.scope is not None), None)
    if scope is not None:
        return scope.minimum(a, b) if op == "Min" else scope.maximum(a, b)
    return symbolic.minimum(a, b) if op == "Min" else symbolic.maximum(a, b)


def _fold_sizes(node, values):
    """A node on symbolic sizes evaluated at import time with numpy on object arrays: Add/Sub/
    Mul/Div (the divisor static), Min/Max (any number of inputs), Neg, Cast/Identity (sizes are integers already), Squeeze,
    Unsqueeze, Concat, Gather, Slice, Reshape; ``None`` for other ops (their converters take the
    object arrays, e.g. Reshape's or Expand's ``shape``).

    Results whose elements are all ints come back as int64 arrays."""
    from onnx import helper
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = values[0]
    axes = ([int(a) for a in values[1]] if op in ("Squeeze", "Unsqueeze") and len(values) > 1 and
            values[1] is not None else attrs.get("axes"))
    try:
        if op in _SIZE_ARITH and len(values) == 2:
            out = _SIZE_ARITH[op](values[0].astype(object), values[1].astype(object))
        elif op in ("Min", "Max"):
            pick = np.frompyfunc(lambda a, b: _size_extremum(op, a, b), 2, 1)
            out = values[0].astype(object)
            for v in values[1:]:
                out = pick(out, v.astype(object))
        elif op == "Neg":
            out = -x
        elif op in ("Cast", "Identity"):
            out = x
        elif op == "Squeeze":
            out = x.squeeze(tuple(axes)) if axes is not None else x.squeeze()
        elif op == "Unsqueeze":
            out = np.expand_dims(x, tuple(axes))
        elif op == "Concat":
            out = np.concatenate([v.astype(object) for v in values if v is not None], axis=attrs["axis"])
        elif op == "Gather":
            out = np.take(x, values[1].astype(np.int64), axis=attrs.get("axis", 0))
        elif op == "Slice" and len(values) >= 3 and all(v is None or v.dtype != object for v in values[1:]):
            sl = [slice(None)] * x.ndim
            axes = values[3] if len(values) > 3 and values[3] is not None else range(len(values[1]))
            steps = values[4] if len(values) > 4 and values[4] is not None else [1] * len(values[1])
            for a, b, e, st in zip(axes, values[1], values[2], steps):
                sl[int(a)] = slice(int(b), int(e), int(st))
            out = x[tuple(sl)]
        elif op == "Reshape" and values[1].dtype != object:
            out = x.reshape([int(d) for d in values[1]])
        else:
            return None
    except (TypeError, ValueError, IndexError):  # e.g. a SymDim divided by a SymDim: the converter reports it
        return None
    out = np.asarray(out, dtype=object)
    if all(isinstance(v, (int, np.integer)) for v in out.flat):
        out = out.astype(np.int64)
    return [out]


def from_onnx(model_or_path: Union["onnx.ModelProto", str], input_shapes: Optional[Dict[str, Sequence[int]]] = None,
              input_values: Optional[Dict[str, np.ndarray]] = None, keep_params: bool = False,
              dim_bounds: Optional[Dict[str, Sequence[Optional[int]]]] = None) -> Module:
    """Import an ONNX model as a graph Module with one function ``main``.

    Parameters
    ----------
    model_or_path : onnx.ModelProto or path of a ``.onnx`` file
        Default-domain opset 9..21 (6..8 and 22..28 accepted, see ``onnx_registry.OPSETS``).
    input_shapes : dict of str -> sequence of int, optional
        Static shapes for inputs (overrides the model's; specializes dynamic dims). Dims left
        dynamic stay symbolic sizes named by their ``dim_param`` (one compile serves every
        size within ``dim_bounds``).
    input_values : dict of str -> numpy.ndarray, optional
        Inputs to specialize on: each becomes a constant and is not an argument of ``main``
        (for shape-like inputs such as Reshape's ``shape`` fed as a graph input).
    dim_bounds : dict of str -> (min, max), optional
        Bounds of symbolic sizes by ``dim_param`` name (``None``: unbounded above); default
        ``(1, None)``. A size of 0 (an empty past cache) needs ``min=0`` and a graph whose
        slices stay provably in range with it. A call outside the bounds raises
        ``ExecutionError``.
    keep_params : bool
        False (default): initializers are constants (as onnxruntime treats them, so constant
        folding, filter layout folding, Winograd and weight packing apply). True: initializers
        used as tensors are params, arguments of ``main`` (``Module.bind_params`` binds them).

    Returns
    -------
    Module
        ``main(inputs...) -> outputs...`` in graph order; initializers named by their
        initializer names.
        BOOL tensors are int8 (0/1).

    Raises
    ------
    BuildError
        On an opset outside 6..28, unsupported ops (one error listing every op type with its
        count), a dynamic input dim with no name (``dim_param``) not given in ``input_shapes``,
        or a converter's check
        (naming the node, op, argument, expected vs actual).
    """
    from onnx import numpy_helper, shape_inference
    model = _load(model_or_path)
    opset = _opset(model)
    input_shapes = dict(input_shapes or {})
    bounds = dict(dim_bounds or {})
    names = [vi.name for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer}]
    for kind, given in (("input_shapes", input_shapes), ("input_values", input_values or {})):
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise BuildError(f"from_onnx: argument '{kind}' names {unknown}, which are not inputs of "
                             f"the model; expected some of {names}")
    try:
        model = shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001  (inference is an aid; converters check shapes)
        raise BuildError(f"from_onnx: onnx.shape_inference failed: {e}") from e
    graph = model.graph
    _check_supported(graph, opset)
    inits = {t.name: _initializer(numpy_helper, t) for t in graph.initializer}
    env: Dict[str, object] = dict(inits)
    params: Dict[str, Tensor] = {}
    bb = GraphBuilder()
    with bb.function("main") as f:
        for vi in graph.input:
            if vi.name in inits:
                continue
            if vi.name in (input_values or {}):
                env[vi.name] = np.asarray(input_values[vi.name])
                continue
            shape, dtype = _input_spec(vi, input_shapes)
            for d in shape:  # a dim_param is at least 1, so slices such as x[:, :1] are in range
                if isinstance(d, str):
                    lo, hi = tuple(bounds.get(d, (1, None)))
                    f.dim(d, min=lo, max=hi)
            env[vi.name] = f.arg(vi.name, shape, dtype)
        def param(name):
            if name not in inits:
                return None
            if name not in params:
                params[name] = f.param(name, np.ascontiguousarray(inits[name]))
            return params[name]

        _run_nodes(graph.node, env, opset, param)
        f.output(*[_as_output(env[vo.name]) for vo in graph.output])
    mod = bb.finish()
    return mod if keep_params else mod.bind_params()


def _initializer(numpy_helper, t) -> np.ndarray:
    try:
        v = numpy_helper.to_array(t)
        return v.astype(np.int8) if v.dtype == np.bool_ else v  # BOOL is carried as int8 0/1
    except Exception as e:  # noqa: BLE001  (raw data of the wrong size, external data missing)
        raise BuildError(f"from_onnx: initializer {t.name!r} cannot be read ({type(e).__name__}: {e}); "
                         "expected its data in the model or next to it (external data)") from e


def _run_nodes(nodes, env: Dict[str, object], opset: int, param) -> None:
    """Convert ``nodes`` in order, adding their outputs to ``env`` (name -> Tensor or numpy
    value); a node whose inputs are all known at import time is evaluated instead. ``param``:
    initializer name -> its param Tensor (None for other names). A subgraph (an If branch, a
    Loop/Scan body) runs the same way on a copy of ``env`` (its outer-scope names stay
    visible) plus its own initializers and inputs: see :meth:`NodeInputs.run_graph`."""
    for node in nodes:
        for n in node.input:
            if n and n not in env:
                raise BuildError(f"onnx node {node.name!r} ({node.op_type}): input {n!r} is undefined")
        values = [env[n] if n else None for n in node.input]

        def as_param(i, _node=node):
            return param(_node.input[i])

        def run_graph(graph, feeds, _env=env):
            from onnx import numpy_helper
            inner = dict(_env)
            inner.update({t.name: _initializer(numpy_helper, t) for t in graph.initializer})
            inner.update(feeds)
            _run_nodes(graph.node, inner, opset, param)
            for vo in graph.output:
                if vo.name not in inner:
                    raise BuildError(f"onnx subgraph {graph.name!r}: output {vo.name!r} is undefined")
            return [inner[vo.name] for vo in graph.output]

        outs = None
        has_graph = any(a.HasField("g") or len(a.graphs) for a in node.attribute)
        if node.op_type not in _NO_FOLD and not has_graph and \
                all(isinstance(v, np.ndarray) or v is None for v in values):
            outs = _fold_sizes(node, values) if any(v is not None and v.dtype == object for v in values) \
                else _fold(node, values, opset)
        if outs is None:
            outs = _convert(node, values, opset, as_param, run_graph)
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v


def _convert(node, values, opset: int, as_param, run_graph=None):
    """Run the converter of ``node``; an exception other than an :class:`MlcError` (a malformed
    node: a missing attribute, an attribute of the wrong type) becomes a ``BuildError`` naming
    the node."""
    from onnx import helper
    try:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return lookup(node.domain or "", node.op_type, opset)(NodeInputs(node, values, attrs, opset, as_param,
                                                                           run_graph))
    except MlcError:
        raise
    except Exception as e:  # noqa: BLE001
        raise BuildError(f"onnx node {node.name!r} ({node.op_type}): cannot convert it "
                         f"({type(e).__name__}: {e}); expected a node valid for opset {opset} "
                         "(onnx.checker.check_model names the problem)") from e


def _as_output(v) -> Tensor:
    """A graph output: a Tensor, or a value folded at import time as a constant."""
    if isinstance(v, Tensor):
        return v
    v = np.asarray(v)
    return ops.constant(v.astype(np.int8) if v.dtype == np.bool_ else v)
