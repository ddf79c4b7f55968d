"""Symbolic shapes: one compile serves every sequence length (TVM Relax's ``R.Tensor(("n",
128))``). A transformer-style block on ``x: (seq, 64)`` is built with ``seq`` symbolic and
bounded, compiled once, and run at several lengths; a call outside the bounds, or with sizes
that disagree, raises ``ExecutionError`` naming the size.

Run: python examples/06_symbolic_shapes.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((128, 64)).astype(np.float32) / 8
W2 = RNG.standard_normal((64, 128)).astype(np.float32) / 11


def reference(x):
    mu = x.mean(-1, keepdims=True)
    h = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    h = np.maximum(h @ W1.T, 0) @ W2.T
    scores = x @ x.T / 8
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return h + (e / e.sum(-1, keepdims=True)) @ x


def main():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("seq", 64))            # a string dim is a symbolic size
        f.dim("seq", min=1, max=512)                 # its bounds, checked at each call
        h = ops.layer_norm(x, None, None)
        h = ops.dense(ops.relu(ops.dense(h, W1)), W2)
        attn = ops.softmax(ops.matmul(x, ops.transpose(x)) / 8.0)   # (seq, seq)
        f.output(h + ops.matmul(attn, x))
    mod = bb.finish()
    print("signature:", ", ".join(str(a) for a in mod.signature("main").args), "->",
          ", ".join(str(r) for r in mod.signature("main").results))
    exe = mlc.compile(mod)
    for seq in (1, 7, 128, 512):
        x = RNG.standard_normal((seq, 64)).astype(np.float32)
        np.testing.assert_allclose(exe(x), reference(x), rtol=1e-3, atol=1e-3)
        print(f"seq={seq}: matches numpy")
    try:
        exe(np.zeros((513, 64), np.float32))
    except mlc.ExecutionError as e:
        print("out of bounds:", e)
    print("one compile, every size: ok")


if __name__ == "__main__":
    main()
