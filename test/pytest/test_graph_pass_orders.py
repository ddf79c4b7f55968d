"""Graph passes in any order, on canonicalized/CSE'd input (shared constants, scalars captured by
``linalg.generic`` bodies), and constant folding of reductions and of fused subgraphs; every
result is compared with numpy."""

import itertools
import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import graph, ops

PASSES = {
    "canonicalize": lambda: "canonicalize",
    "cse": lambda: "cse",
    "fuse": graph.FuseOps,
    "fold": lambda: graph.FoldConstant(mlc.compile),
    "dce": graph.DeadCodeElimination,
    "mlc-cse": graph.CommonSubexprElimination,
}


def mlp_case():
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    w1, b1 = rng.standard_normal((10, 32)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 16))
        f.output(ops.dense(ops.relu(ops.dense(x, w0, b0)), w1, b1))
    x = rng.standard_normal((4, 16)).astype(np.float32)
    return bb.finish(), x, np.maximum(x @ w0.T + b0, 0) @ w1.T + b1


def conv_bn_relu_case():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    g, b, m, v = (rng.random(4).astype(np.float32) + 0.5 for _ in range(4))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 3, 6, 6))
        f.output(ops.relu(ops.batch_norm(ops.conv2d(x, w, padding=1), g, b, m, v)))
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((2, 4, 6, 6), np.float32)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + 6, j:j + 6], w[:, :, i, j])
    bn = (conv - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5) * g[:, None, None] + b[:, None, None]
    return bb.finish(), x, np.maximum(bn, 0)


def canonical_text(mod) -> str:
    """``mod``'s text with its resource blobs renamed ``r0``, ``r1``, ... in order of first use.

    MLIR makes blob names unique in a context (a folded ``x`` is ``x_1`` the next time), so the
    same module from two pass orders prints differently; the blobs' bytes stay in the text, so
    modules with equal canonical texts differ in nothing but those names."""
    text = str(mod)
    names = list(dict.fromkeys(re.findall(r"dense_resource<([^>]+)>", text)))
    section = text.split("{-#", 1)[-1]
    if not names or not all(re.search(rf"(?<![\w.]){re.escape(n)}: \"0x", section) for n in names):
        return text     # a blob not printed: keep the names (never merge modules told apart by data)
    index = {n: f"r{i}" for i, n in enumerate(names)}
    alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    return re.sub(rf"(?<![\w.])({alternatives})(?![\w.])", lambda m: index[m.group(1)], text)


@pytest.mark.parametrize("case", [mlp_case, conv_bn_relu_case])
def test_every_pass_order_keeps_numpy_results(case):
    """All 720 orders of canonicalize, cse, FuseOps, FoldConstant, DCE and CSE (orders with a
    common prefix share its passes' runs, and a pass runs once on each distinct module: the
    passes are functions of the module, so prefixes that reach the same module (up to the names
    of its blobs) go on alike; FoldConstant compiles, 326 runs of it took most of the time);
    each distinct resulting module is compiled once and compared with numpy."""
    mod, x, want = case()
    after = {(): (mod, canonical_text(mod))}   # (module, its text) after each prefix of an order
    step = {}               # (text of a module, pass) -> (module, text) after the pass
    distinct = {}
    for order in itertools.permutations(PASSES):
        for k in range(1, len(order) + 1):
            if order[:k] not in after:
                prev, text = after[order[:k - 1]]
                if (text, order[k - 1]) not in step:
                    out = graph.Sequential([PASSES[order[k - 1]]()])(prev)
                    step[text, order[k - 1]] = (out, canonical_text(out))
                after[order[:k]] = step[text, order[k - 1]]
        distinct.setdefault(after[order][1], (order, after[order][0]))
    for order, out in distinct.values():
        assert any("mlc.primitive" in f.attributes for f in out.func_ops()), order
        np.testing.assert_allclose(mlc.compile(out)(x), want, rtol=1e-4, atol=1e-4, err_msg=str(order))


def test_fuse_ops_after_canonicalize_and_cse_clones_captured_scalars():
    """After cse one ``0.0`` is shared by the inits and the relu body (captured, not an
    operand): every primitive gets its own copy."""
    mod, x, want = mlp_case()
    out = graph.Sequential(["canonicalize", "cse", graph.FuseOps()])(mod)
    main = [f for f in out.func_ops() if f.sym_name.value == "main"][0]
    assert [o.operation.name for o in main.regions[0].blocks[0].operations] == ["func.call", "func.call",
                                                                                "func.return"]
    np.testing.assert_allclose(mlc.compile(out)(x), want, rtol=1e-4, atol=1e-4)


def _ops(mod):
    return [o.operation.name for f in mod.func_ops() for o in f.regions[0].blocks[0].operations]


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_fold_constant_reduction_of_bound_param(axis):
    c = np.arange(16, dtype=np.float32).reshape(4, 4) / 7 - 1
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4,))
        f.output(ops.add(x, ops.sum(f.param("c", c), axis=axis)))
    mod = bb.finish().bind_params()
    folded = graph.FoldConstant(mlc.compile)(mod)
    assert "linalg.fill" not in _ops(folded)          # the reduction and its init are gone
    assert sum(n == "linalg.generic" for n in _ops(folded)) == 1
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    np.testing.assert_allclose(mlc.compile(folded)(x), x + c.sum(axis=axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fuse_first", [True, False])
def test_fold_constant_transpose_plus_one(fuse_first):
    """``transpose(W) + 1`` feeding a matmul folds to one constant, also inside a primitive."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 5
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 4))
        f.output(ops.matmul(x, ops.add(ops.transpose(w), 1.0)))
    mod = bb.finish()
    if fuse_first:
        mod = graph.FuseOps()(mod)
    folded = graph.FoldConstant(mlc.compile)(mod)
    names = _ops(folded)
    assert "linalg.transpose" not in names and "linalg.generic" not in names and "linalg.matmul" in names
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(mlc.compile(folded)(x), x @ (w.T + 1), rtol=1e-5, atol=1e-5)


def test_fold_constant_after_fusion_with_captured_scalar_in_reduction():
    """A constant chain ending in a reduction, fused with a runtime input: the constant part
    folds, the rest stays."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 3
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 4))
        f.output(ops.add(ops.relu(x), ops.sum(ops.add(ops.transpose(w), 1.0), axis=1)))
    out = graph.Sequential(["canonicalize", "cse", graph.FuseOps(), graph.FoldConstant(mlc.compile)])(bb.finish())
    assert "linalg.transpose" not in _ops(out)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(mlc.compile(out)(x), np.maximum(x, 0) + (w.T + 1).sum(1), rtol=1e-5, atol=1e-5)
