"""ONNX control flow: If, Scan (opset 9+) and Loop, converted by inlining their subgraphs
(:meth:`NodeInputs.run_graph`) at import time. Conventions as in :mod:`.onnx_ops`.

* ``If``: a condition known at import time inlines the branch it takes; a run-time condition
  converts both branches and selects each output with ``ops.where`` (branch outputs of one
  shape and dtype; others are refused: the compiled code has static shapes).
* ``Scan``: the body is unrolled over the (static) scan length, at most :data:`MAX_UNROLL`
  iterations: each iteration reads slice ``i`` (or ``L - 1 - i`` for a reverse direction) of
  every scan input along its axis, and the scan outputs are the per-iteration values stacked
  along their axis (in reverse for a reverse direction).
* ``Loop``: unrolled likewise; the trip count and every condition it reads must be known at
  import time (a static ``M``, a constant ``cond``, a body whose ``cond_out`` folds), since
  the number of iterations fixes the output shapes. A condition computed at run time is
  refused. Scan outputs are stacked along a new leading axis.

Source: ONNX operator spec (If-11/13, Scan-9/11/16, Loop-11/13/16); TVM Relax's
``onnx_frontend`` unrolls static loops the same way.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import NodeInputs, register, shape_of

#: the most iterations a Scan or Loop is unrolled into
MAX_UNROLL = 128


def _tensor(v):
    """A Tensor of ``v`` (an import-time numpy value becomes a constant)."""
    if isinstance(v, Tensor):
        return v
    v = np.asarray(v)
    return ops.constant(v.astype(np.int8) if v.dtype == np.bool_ else v)


def _dtype(v) -> str:
    return v.dtype if isinstance(v, Tensor) else str(np.asarray(v).dtype).replace("bool", "int8")


def _stack(n: NodeInputs, values, axis: int, what: str):
    """``values`` (one per iteration, one shape) stacked along a new ``axis``."""
    shapes = {tuple(shape_of(v)) for v in values}
    if len(shapes) != 1:
        raise n.fail(f"{what} has shapes {sorted(shapes)} across iterations; expected one shape")
    rank = len(shapes.pop()) + 1
    if not -rank <= axis < rank:
        raise n.fail(f"{what} axis {axis}; expected in [{-rank}, {rank})")
    parts = [ops.unsqueeze(_tensor(v), [axis % rank]) for v in values]
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=axis % rank)


@register("If")
def _if(n: NodeInputs) -> List[object]:
    cond = n.values[0]
    then_g, else_g = n.attr("then_branch"), n.attr("else_branch")
    if not isinstance(cond, Tensor):
        return n.run_graph(then_g if bool(np.asarray(cond).reshape(-1)[0]) else else_g, {})
    if int(np.prod(shape_of(cond))) != 1:
        raise n.fail(f"input 'cond' has shape {shape_of(cond)}; expected a single element")
    yes, no = n.run_graph(then_g, {}), n.run_graph(else_g, {})
    c = ops.reshape(cond, ())
    outs = []
    for i, (a, b) in enumerate(zip(yes, no)):
        if tuple(shape_of(a)) != tuple(shape_of(b)) or _dtype(a) != _dtype(b):
            raise n.fail(f"output {i} is {_dtype(a)} {tuple(shape_of(a))} in then_branch and {_dtype(b)} "
                         f"{tuple(shape_of(b))} in else_branch with a condition computed at run time; expected "
                         "one shape and dtype (or a condition known at import time)")
        outs.append(ops.where(c, _tensor(a), _tensor(b)))
    return outs


@register("Scan", opsets=(9, 28))
def _scan(n: NodeInputs) -> List[object]:
    body = n.attr("body")
    m = int(n.attr("num_scan_inputs"))
    states, scans = list(n.values[:len(n) - m]), [n.t(i) for i in range(len(n) - m, len(n))]
    in_axes = [int(a) for a in n.attr("scan_input_axes", [0] * m)]
    in_dirs = [int(d) for d in n.attr("scan_input_directions", [0] * m)]
    k = len(body.output) - len(states)
    out_axes = [int(a) for a in n.attr("scan_output_axes", [0] * k)]
    out_dirs = [int(d) for d in n.attr("scan_output_directions", [0] * k)]
    axes = []
    for j, (x, a) in enumerate(zip(scans, in_axes)):
        r = len(shape_of(x))
        if not -r <= a < r:
            raise n.fail(f"attribute 'scan_input_axes' [{j}] is {a}; expected in [{-r}, {r})")
        axes.append(a % r)
    lengths = {shape_of(x)[a] for x, a in zip(scans, axes)}
    if len(lengths) != 1 or not all(isinstance(v, int) for v in lengths):
        raise n.fail(f"scan inputs have lengths {sorted(map(str, lengths))} along their axes; expected one static "
                     "length")
    length = lengths.pop()
    if not 1 <= length <= MAX_UNROLL:
        raise n.fail(f"the scan length is {length}; expected 1..{MAX_UNROLL} (the body is unrolled)")
    names = [vi.name for vi in body.input]
    per_iter = [[] for _ in range(k)]
    for i in range(length):
        feeds = dict(zip(names, states))
        for j, (x, a, d) in enumerate(zip(scans, axes, in_dirs)):
            pos = length - 1 - i if d else i
            feeds[names[len(states) + j]] = ops.squeeze(ops.slice(x, [pos], [pos + 1], axes=[a]), [a])
        outs = n.run_graph(body, feeds)
        states = outs[:len(states)]
        for j in range(k):
            per_iter[j].append(outs[len(states) + j])
    stacked = [_stack(n, vals[::-1] if d else vals, a, f"scan output {j}")
               for j, (vals, a, d) in enumerate(zip(per_iter, out_axes, out_dirs))]
    return list(states) + stacked


def _static_bool(v) -> bool:
    return bool(np.asarray(v).reshape(-1)[0])


@register("Loop", opsets=(11, 28))
def _loop(n: NodeInputs) -> List[object]:
    body = n.attr("body")
    if n.has(0) and isinstance(n.values[0], Tensor):
        raise n.fail("input 'M' (the trip count) is computed at run time; expected a constant: the unrolled "
                     "loop's output shapes depend on it")
    if n.has(1) and isinstance(n.values[1], Tensor):
        raise n.fail("input 'cond' is computed at run time; expected a constant: the unrolled loop's output "
                     "shapes depend on it")
    trips = int(np.asarray(n.values[0]).reshape(-1)[0]) if n.has(0) else None
    cond = _static_bool(n.values[1]) if n.has(1) else True
    carried = list(n.values[2:])
    names = [vi.name for vi in body.input]
    k = len(body.output) - 1 - len(carried)
    per_iter = [[] for _ in range(k)]
    i = 0
    while cond and (trips is None or i < trips):
        if i == MAX_UNROLL:
            raise n.fail(f"the loop runs more than {MAX_UNROLL} iterations; expected at most that many (the body "
                         "is unrolled)")
        feeds = dict(zip(names, [np.asarray(i, np.int64), np.asarray(1, np.int8)] + carried))
        outs = n.run_graph(body, feeds)
        carried = outs[1:1 + len(carried)]
        for j in range(k):
            per_iter[j].append(outs[1 + len(carried) + j])
        i += 1
        if isinstance(outs[0], Tensor):
            if trips is not None and i >= trips:
                break
            raise n.fail("the body's 'cond_out' is computed at run time; expected a constant: the number of "
                         "iterations fixes the output shapes")
        cond = _static_bool(outs[0])
    if k and not i:
        raise n.fail("the loop runs no iteration and has scan outputs; expected at least one iteration (their "
                     "shapes come from the body)")
    return [_tensor(v) if isinstance(v, Tensor) else v for v in carried] + \
        [_stack(n, vals, 0, f"scan output {j}") for j, vals in enumerate(per_iter)]
