"""ONNX recurrent layers: ``RNN``, ``GRU`` and ``LSTM`` (opsets 7+), unrolled over the static
sequence length at import time into one chain of builder ops per direction.

Shapes (``layout`` 0; ``layout`` 1 swaps the sequence and batch axes of X/Y and puts the
batch first in the states): X (S, B, I); W (D, G*H, I); R (D, G*H, H); B (D, 2*G*H) = input
biases then recurrence biases; ``sequence_lens`` (B,); ``initial_h``/``initial_c`` (D, B, H);
LSTM ``P`` (D, 3*H) peepholes (i, o, f). Outputs Y (S, D, B, H), Y_h (D, B, H), LSTM Y_c
(D, B, H). G is 1 (RNN), 3 (GRU gates z, r, h) or 4 (LSTM gates i, o, f, c); D is 2 for
``bidirectional``. The input projection of all steps is one einsum per direction; each step
adds the recurrence ``H_{t-1} @ R^T``. With ``sequence_lens`` a step ``t >= len[b]`` keeps
the state of batch row b and writes zeros to Y, which is also right for the reverse direction
(it starts from the initial state at ``t = len[b] - 1``).

Activations: Sigmoid, Tanh, Relu, and the parameterised Affine, LeakyRelu, ThresholdedRelu,
ScaledTanh, HardSigmoid, Elu, Softsign, Softplus (``activation_alpha``/``activation_beta``
in the spec's order); ``clip`` bounds the activations' inputs; LSTM ``input_forget`` is
refused. Source: ONNX operator spec (RNN, GRU, LSTM); ``onnx.reference.ops.op_lstm``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from .onnx_registry import NodeInputs, dtype_of, register, shape_of

#: op -> (gate count, default activations per direction)
_KINDS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}
#: activation -> (default alpha, default beta); None: takes no parameter
_PARAMS = {"Sigmoid": None, "Tanh": None, "Relu": None, "Softsign": None, "Softplus": None,
           "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
           "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}


def _activation(name: str, alpha, beta, dtype):
    """``x -> f(x)`` for an ONNX RNN activation name (spec section "activation functions")."""
    c = lambda v: np.asarray(v, dtype)  # noqa: E731
    if name == "Sigmoid":
        return ops.sigmoid
    if name == "Tanh":
        return ops.tanh
    if name == "Relu":
        return ops.relu
    if name == "Softsign":
        return lambda x: ops.divide(x, ops.add(ops.abs(x), c(1.0)))
    if name == "Softplus":
        return lambda x: ops.log(ops.add(ops.exp(x), c(1.0)))
    if name == "Affine":
        return lambda x: ops.add(ops.multiply(x, c(alpha)), c(beta))
    if name == "LeakyRelu":
        return lambda x: ops.where(ops.less(x, c(0.0)), ops.multiply(x, c(alpha)), x)
    if name == "ThresholdedRelu":
        return lambda x: ops.where(ops.greater(x, c(alpha)), x, c(0.0))
    if name == "ScaledTanh":
        return lambda x: ops.multiply(ops.tanh(ops.multiply(x, c(beta))), c(alpha))
    if name == "HardSigmoid":
        return lambda x: ops.clip(ops.add(ops.multiply(x, c(alpha)), c(beta)), 0.0, 1.0)
    return lambda x: ops.where(ops.less(x, c(0.0)),  # Elu
                               ops.multiply(ops.subtract(ops.exp(x), c(1.0)), c(alpha)), x)


def _activations(n: NodeInputs, count: int, dirs: int, dtype) -> List[list]:
    """The activations of each direction: ``dirs`` lists of ``count`` callables."""
    names = [a.decode() if isinstance(a, bytes) else a for a in n.attr("activations", [])]
    if not names:
        names = _KINDS[n.node.op_type][1] * dirs
    if len(names) != count * dirs:
        raise n.fail(f"attribute 'activations' has {len(names)} names; expected {count * dirs} "
                     f"({count} per direction)")
    alphas, betas = list(n.attr("activation_alpha", [])), list(n.attr("activation_beta", []))
    fns = []
    for name in names:
        if name not in _PARAMS:
            raise n.fail(f"attribute 'activations' names {name!r}; expected one of {sorted(_PARAMS)}")
        p = _PARAMS[name]
        alpha = beta = None
        if p is not None:
            alpha = alphas.pop(0) if alphas else p[0]
            if p[1] is not None:
                beta = betas.pop(0) if betas else p[1]
        fns.append(_activation(name, alpha, beta, dtype))
    return [fns[d * count:(d + 1) * count] for d in range(dirs)]


def _dir(v, d: int):
    """Row ``d`` of a per-direction operand (D, ...) -> (...)."""
    return ops.squeeze(ops.slice(v, [d], [d + 1], axes=[0]), [0])


def _expect(n: NodeInputs, v, arg: str, shape: tuple):
    if shape_of(v) != shape:
        raise n.fail(f"input '{arg}' has shape {shape_of(v)}; expected {shape}")


def _recurrent(n: NodeInputs) -> List[object]:
    op = n.node.op_type
    gates = _KINDS[op][0]
    x, w, r = n.t(0), n.t(1), n.t(2)
    dtype = dtype_of(x)
    if dtype not in ("float32", "float64", "float16"):
        raise n.fail(f"input 'X' has dtype {dtype}; expected a float type")
    layout = int(n.attr("layout", 0))
    if layout not in (0, 1):
        raise n.fail(f"attribute 'layout' is {layout}; expected 0 or 1")
    if len(shape_of(x)) != 3:
        raise n.fail(f"input 'X' has shape {shape_of(x)}; expected rank 3")
    if layout == 1:
        x = ops.transpose(x, (1, 0, 2))
    steps, batch, size = shape_of(x)
    direction = n.str_attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise n.fail(f"attribute 'direction' is {direction!r}; expected forward, reverse or "
                     f"bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(n.attr("hidden_size", shape_of(r)[-1]))
    _expect(n, w, "W", (dirs, gates * hidden, size))
    _expect(n, r, "R", (dirs, gates * hidden, hidden))
    if op == "LSTM" and int(n.attr("input_forget", 0)):
        raise n.fail("attribute 'input_forget' is 1; coupled input/forget gates are not converted")
    acts = _activations(n, len(_KINDS[op][1]), dirs, dtype)
    clip = n.attr("clip")
    bound = (lambda v: ops.clip(v, -float(clip), float(clip))) if clip is not None else (lambda v: v)
    bias = n.t(3) if n.has(3) else None
    if bias is not None:
        _expect(n, bias, "B", (dirs, 2 * gates * hidden))
    lens = ops.cast(n.t(4), "int64") if n.has(4) else None
    if lens is not None:
        _expect(n, lens, "sequence_lens", (batch,))
    states = [n.t(5) if n.has(5) else None, n.t(6) if op == "LSTM" and n.has(6) else None]
    for k, s in enumerate(states):
        if s is not None:
            _expect(n, s, ("initial_h", "initial_c")[k],
                    (batch, dirs, hidden) if layout == 1 else (dirs, batch, hidden))
            states[k] = ops.transpose(s, (1, 0, 2)) if layout == 1 else s
    peep = n.t(7) if op == "LSTM" and n.has(7) else None
    if peep is not None:
        _expect(n, peep, "P", (dirs, 3 * hidden))
    zeros = np.zeros((batch, hidden), dtype)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        xw = ops.einsum("sbi,gi->sbg", x, _dir(w, d))
        wb = rb = None
        if bias is not None:
            wb, rb = ops.split(_dir(bias, d), [gates * hidden] * 2, axis=0)
            xw = ops.add(xw, wb)
        xs = ops.split(xw, [1] * steps, axis=0) if steps > 1 else [xw]
        h = _dir(states[0], d) if states[0] is not None else zeros
        c = _dir(states[1], d) if states[1] is not None else zeros
        p = ops.split(_dir(peep, d), [hidden] * 3, axis=0) if peep is not None else None
        cell = _Cell(op, _dir(r, d), rb, p, hidden, acts[d], bound, n.attr("linear_before_reset", 0))
        backward = direction == "reverse" or d == 1
        order = range(steps - 1, -1, -1) if backward else range(steps)
        out = [None] * steps
        for t in order:
            h_new, c_new = cell.step(ops.squeeze(xs[t], [0]), h, c)
            if lens is not None:
                keep = ops.unsqueeze(ops.less(np.int64(t), lens), [1])
                out[t] = ops.where(keep, h_new, zeros)
                h = ops.where(keep, h_new, h)
                c = ops.where(keep, c_new, c) if c_new is not None else None
            else:
                out[t], h, c = h_new, h_new, c_new
        ys.append(ops.concat([ops.unsqueeze(y, [0]) for y in out], axis=0))  # (S, B, H)
        hs.append(h)
        cs.append(c)
    return _outputs(n, layout, ys, hs, cs)


def _outputs(n: NodeInputs, layout: int, ys, hs, cs) -> List[object]:
    wanted = [bool(o) for o in n.node.output]
    res = [None] * len(wanted)
    if wanted[0]:
        y = ops.concat([ops.unsqueeze(v, [1]) for v in ys], axis=1)  # (S, D, B, H)
        res[0] = ops.transpose(y, (2, 0, 1, 3)) if layout == 1 else y
    for k, vs in ((1, hs), (2, cs)):
        if k < len(wanted) and wanted[k]:
            s = ops.concat([ops.unsqueeze(v, [0]) for v in vs], axis=0)  # (D, B, H)
            res[k] = ops.transpose(s, (1, 0, 2)) if layout == 1 else s
    return res


class _Cell:
    """One direction's step function ``(x_t @ W^T + Wb, H_{t-1}, C_{t-1}) -> (H_t, C_t)``
    (C is None but for LSTM), with the recurrence weight ``r`` (G*H, H) and bias ``rb``."""

    def __init__(self, op, r, rb, peep, hidden, acts, bound, linear_before_reset):
        self.op, self.r, self.rb, self.peep, self.hidden = op, r, rb, peep, hidden
        self.acts, self.bound, self.lbr = acts, bound, int(linear_before_reset)

    def _rec(self, h, lo: int, hi: int):
        """``h @ R[lo*H:hi*H]^T + Rb[lo*H:hi*H]`` (B, (hi-lo)*H)."""
        hd = self.hidden
        r = self.r if (lo, hi) == (0, shape_of(self.r)[0] // hd) else \
            ops.slice(self.r, [lo * hd], [hi * hd], axes=[0])
        y = ops.einsum("bh,gh->bg", h, r)
        if self.rb is not None:
            y = ops.add(y, ops.slice(self.rb, [lo * hd], [hi * hd], axes=[0]))
        return y

    def step(self, xw, h, c):
        hd, f, b = self.hidden, self.acts, self.bound
        if self.op == "RNN":
            return f[0](b(ops.add(xw, self._rec(h, 0, 1)))), None
        if self.op == "GRU":
            xz, xr, xh = ops.split(xw, [hd] * 3, axis=1)
            rz, rr = ops.split(self._rec(h, 0, 2), [hd] * 2, axis=1)
            z = f[0](b(ops.add(xz, rz)))
            rg = f[0](b(ops.add(xr, rr)))
            if self.lbr:
                hh = f[1](b(ops.add(xh, ops.multiply(rg, self._rec(h, 2, 3)))))
            else:
                hh = f[1](b(ops.add(xh, self._rec(ops.multiply(rg, h), 2, 3))))
            one = np.ones((), dtype_of(hh))
            return ops.add(ops.multiply(ops.subtract(one, z), hh), ops.multiply(z, h)), None
        gi, go, gf, gc = ops.split(ops.add(xw, self._rec(h, 0, 4)), [hd] * 4, axis=1)
        if self.peep is not None:
            pi, po, pf = self.peep
            gi, gf = ops.add(gi, ops.multiply(pi, c)), ops.add(gf, ops.multiply(pf, c))
        i, fg = f[0](b(gi)), f[0](b(gf))
        c_new = ops.add(ops.multiply(fg, c), ops.multiply(i, f[1](b(gc))))
        if self.peep is not None:
            go = ops.add(go, ops.multiply(self.peep[1], c_new))
        return ops.multiply(f[0](b(go)), f[2](c_new)), c_new


@register("RNN", "GRU", "LSTM", opsets=(7, 28))
def _rnn(n: NodeInputs) -> List[object]:
    return _recurrent(n)
