"""PyTorch frontend, the fx path: ``from_fx`` imports an ``fx.symbolic_trace`` graph (the MLC
course's path), mapping each ``call_function`` / ``call_method`` / ``call_module`` target to the
ATen converter of :func:`~mlc_mlir.frontends.torch.from_torch` that computes the same thing.

``torch`` is an optional dependency (``pip install mlc-mlir[torch]``), imported where it is used.

Source: TVM Relax ``frontend/torch/fx_translator.py`` (``from_fx``).
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Dict, Optional, Sequence

from ..builder import GraphBuilder
from ..errors import BuildError
from ..ir import Module
from .torch import (CONVERTERS, ConvertContext, _convert, _flatten_outputs, _getitem,
                    _report_unsupported)


def _fx_function_map() -> Dict[object, str]:
    """fx ``call_function`` targets -> the ATen converter they share."""
    import torch
    import torch.nn.functional as F

    return {
        torch.matmul: "aten.matmul.default", operator.matmul: "aten.matmul.default",
        torch.mm: "aten.mm.default", torch.bmm: "aten.bmm.default",
        torch.relu: "aten.relu.default", F.relu: "aten.relu.default", torch.tanh: "aten.tanh.default",
        torch.sigmoid: "aten.sigmoid.default", torch.exp: "aten.exp.default", F.gelu: "aten.gelu.default",
        operator.add: "aten.add.Tensor", torch.add: "aten.add.Tensor",
        operator.sub: "aten.sub.Tensor", torch.sub: "aten.sub.Tensor",
        operator.mul: "aten.mul.Tensor", torch.mul: "aten.mul.Tensor",
        operator.truediv: "aten.div.Tensor", torch.div: "aten.div.Tensor",
        torch.flatten: "aten.flatten.using_ints", torch.reshape: "aten.reshape.default",
        torch.permute: "aten.permute.default", torch.transpose: "aten.transpose.int",
        torch.softmax: "aten.softmax.int", F.softmax: "aten.softmax.int", F.linear: "aten.linear.default",
        torch.cat: "aten.cat.default", torch.mean: "aten.mean.dim", torch.sum: "aten.sum.dim_IntList",
    }


#: fx ``call_method`` names -> ATen converter.
_FX_METHODS = {
    "relu": "aten.relu.default", "tanh": "aten.tanh.default", "sigmoid": "aten.sigmoid.default",
    "exp": "aten.exp.default", "view": "aten.view.default", "reshape": "aten.reshape.default",
    "flatten": "aten.flatten.using_ints", "permute": "aten.permute.default",
    "transpose": "aten.transpose.int", "t": "aten.t.default", "contiguous": "aten.contiguous.default",
    "softmax": "aten.softmax.int", "mean": "aten.mean.dim", "sum": "aten.sum.dim_IntList",
    "add": "aten.add.Tensor", "mul": "aten.mul.Tensor", "matmul": "aten.matmul.default",
    "unsqueeze": "aten.unsqueeze.default",
}
_VARIADIC = {"view", "reshape", "permute"}  # x.view(2, 3) == x.view((2, 3))


def _fx_module_map():
    """fx ``call_module`` types -> ``(ATen converter, args builder(ctx, module, path, x))``."""
    import torch.nn as nn

    def p(ctx, path, m, attr):
        t = getattr(m, attr, None)
        return None if t is None else ctx.param(f"{path}.{attr}" if path else attr, t)

    return {
        nn.Linear: ("aten.linear.default", lambda c, m, n, x: [x, p(c, n, m, "weight"), p(c, n, m, "bias")]),
        nn.Conv2d: ("aten.conv2d.default", lambda c, m, n, x: [x, p(c, n, m, "weight"), p(c, n, m, "bias"),
                                                                list(m.stride), list(m.padding), list(m.dilation),
                                                                m.groups]),
        nn.BatchNorm2d: ("aten._native_batch_norm_legit_no_training.default",
                         lambda c, m, n, x: [x, p(c, n, m, "weight"), p(c, n, m, "bias"),
                                             p(c, n, m, "running_mean"), p(c, n, m, "running_var"),
                                             m.momentum, m.eps]),
        nn.ReLU: ("aten.relu.default", lambda c, m, n, x: [x]),
        nn.Tanh: ("aten.tanh.default", lambda c, m, n, x: [x]),
        nn.GELU: ("aten.gelu.default", lambda c, m, n, x: [x, m.approximate]),
        nn.MaxPool2d: ("aten.max_pool2d.default", lambda c, m, n, x: [x, m.kernel_size, m.stride or m.kernel_size,
                                                                      m.padding, m.dilation, m.ceil_mode]),
        nn.AdaptiveAvgPool2d: ("aten.adaptive_avg_pool2d.default", lambda c, m, n, x: [x, m.output_size]),
        nn.Flatten: ("aten.flatten.using_ints", lambda c, m, n, x: [x, m.start_dim, m.end_dim]),
        nn.LayerNorm: ("aten.layer_norm.default", lambda c, m, n, x: [x, list(m.normalized_shape),
                                                                      p(c, n, m, "weight"), p(c, n, m, "bias"),
                                                                      m.eps]),
        nn.Softmax: ("aten.softmax.int", lambda c, m, n, x: [x, m.dim]),
        nn.Embedding: ("aten.embedding.default", lambda c, m, n, x: [p(c, n, m, "weight"), x]),
        nn.Dropout: ("aten.clone.default", lambda c, m, n, x: [x]),
        nn.Identity: ("aten.clone.default", lambda c, m, n, x: [x]),
    }


def _fetch_attr(gm, target: str):
    obj = gm
    for i, atom in enumerate(target.split(".")):
        if not hasattr(obj, atom):
            raise BuildError(f"from_fx: get_attr '{target}': '{'.'.join(target.split('.')[:i + 1])}' does not exist")
        obj = getattr(obj, atom)
    return obj


def from_fx(graph_module, input_shapes: Sequence[Sequence[int]],
            input_dtypes: Optional[Sequence[str]] = None, keep_params: bool = False) -> Module:
    """Import an ``torch.fx.GraphModule`` (``fx.symbolic_trace(model)``), the MLC course's
    ``from_fx`` with its ``call_function`` / ``call_module`` maps built in; each fx target maps to
    the ATen converter of :func:`from_torch` that computes the same thing.

    Parameters
    ----------
    graph_module : torch.fx.GraphModule
    input_shapes : sequence of shapes
        One static shape per placeholder, in order.
    input_dtypes : sequence of str, optional
        One dtype per placeholder (default ``float32``).
    keep_params : bool
        As :func:`from_torch`: weights are constants unless True (then params).

    Returns
    -------
    Module
        ``main(<params>..., <inputs>...)``; ``get_attr`` tensors and module weights become
        constants (params with ``keep_params=True``) named by their state_dict keys (``weight``,
        ``fc1.bias``); inputs by placeholder names.

    Raises
    ------
    BuildError
        Listing every unsupported function / method / module type (count and first location), for
        a wrong number of input shapes, or a converter's failure.
    """
    api = "from_fx"
    fmap, mmap = _fx_function_map(), _fx_module_map()
    modules = dict(graph_module.named_modules())
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    if len(input_shapes) != len(placeholders):
        raise BuildError(f"{api}: argument 'input_shapes' has {len(input_shapes)} shapes; expected "
                         f"{len(placeholders)} (one per placeholder {[n.name for n in placeholders]})")
    dtypes_ = list(input_dtypes) if input_dtypes is not None else ["float32"] * len(placeholders)
    missing, first = Counter(), {}

    def key_of(node) -> Optional[str]:
        if node.op == "call_function":
            return fmap.get(node.target) if node.target is not operator.getitem else "getitem"
        if node.op == "call_method":
            return _FX_METHODS.get(node.target)
        if node.op == "call_module":
            return "module" if type(modules[node.target]) in mmap else None
        return "other"

    for node in graph_module.graph.nodes:
        if key_of(node) is None:
            what = {"call_function": lambda: getattr(node.target, "__name__", str(node.target)),
                    "call_method": lambda: f"Tensor.{node.target}",
                    "call_module": lambda: type(modules[node.target]).__name__}[node.op]()
            missing[f"{node.op} {what}"] += 1
            first.setdefault(f"{node.op} {what}", f"node '{node.name}'")
    _report_unsupported(api, missing, first, {})

    bb = GraphBuilder()
    with bb.function("main") as f:
        ctx = ConvertContext(f)
        inputs = iter(zip(input_shapes, dtypes_))
        for node in graph_module.graph.nodes:
            if node.op == "placeholder":
                shape, dt = next(inputs)
                ctx.values[node.name] = f.arg(node.name, list(shape), dt)
            elif node.op == "get_attr":
                ctx.values[node.name] = ctx.param(node.target, _fetch_attr(graph_module, node.target))
            elif node.op == "output":
                f.output(*_flatten_outputs(api, ctx.lookup(node.args[0])))
            else:
                args, kwargs = list(ctx.lookup(tuple(node.args))), ctx.lookup(dict(node.kwargs))
                key = key_of(node)
                if key == "getitem":
                    ctx.values[node.name] = _getitem(node, *args)
                    continue
                if node.op == "call_module":
                    m = modules[node.target]
                    key, build = mmap[type(m)]
                    args = build(ctx, m, node.target, args[0])
                elif node.op == "call_method" and node.target in _VARIADIC and len(args) > 2:
                    args = [args[0], list(args[1:])]
                out = _convert(ctx, node, key, CONVERTERS[key], args, kwargs)
                # a module's forward returns the multi-output op's primary result (BatchNorm2d)
                ctx.values[node.name] = out[0] if node.op == "call_module" and isinstance(out, tuple) else out
    mod = bb.finish()
    return mod if keep_params else mod.bind_params()
