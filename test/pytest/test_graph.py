"""Graph passes keep results equal to numpy references: MLP, CNN, random op graphs; each
pass's structural effect (fusion groups, folded weights, removed code)."""

import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.graph.op_kinds import op_kind


def mlp(batch=4, seed=0, with_ref=False):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((32, 16)).astype(np.float32)
    b0 = rng.standard_normal(32).astype(np.float32)
    w1 = rng.standard_normal((10, 32)).astype(np.float32)
    b1 = rng.standard_normal(10).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(batch, 16))
        f.output(ops.dense(ops.relu(ops.dense(x, w0, b0)), w1, b1))
    if with_ref:
        return bb.finish(), lambda xn: np.maximum(xn @ w0.T + b0, 0) @ w1.T + b1
    return bb.finish()


def matches_numpy(mod, want, *inputs, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(mlc.compile(mod)(*inputs), want, rtol=rtol, atol=atol)


def primitives(mod):
    return [f for f in mod.func_ops() if "mlc.primitive" in f.attributes]


def test_fuse_ops_mlp_groups_dense_bias_relu():
    mod, ref = mlp(with_ref=True)
    fused = graph.FuseOps()(mod)
    prims = primitives(fused)
    assert len(prims) == 2
    names = [p.sym_name.value for p in prims]
    assert names[0].startswith("fused_dense_dense_bias_add_relu")
    text = str(fused)
    assert text.count("call @fused_") == 2
    # bias add + relu became one generic in the first primitive
    body = str(prims[0])
    assert body.count("linalg.generic") == 1 and "arith.maximumf" in body
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    matches_numpy(fused, ref(x), x, rtol=1e-4, atol=1e-4)
    # idempotent
    assert len(primitives(graph.FuseOps()(fused))) == 2


def test_fuse_ops_keeps_reshapes_out_of_a_matmul_group():
    """BERT's FFN: matmul -> bias add -> expand_shape -> gelu -> collapse_shape. The reshape
    joins the gelu's group, not the matmul's (linalg-fuse-elementwise-ops would propagate it into
    the matmul and leave an unscheduled 3-d linalg.generic); numerics vs numpy (scipy erf)."""
    from scipy.special import erf
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        h = ops.add(ops.matmul(f.arg("x", shape=(8, 16)), w), b)
        g = ops.gelu(ops.reshape(h, (1, 8, 32)), approximate="none")
        f.output(ops.reshape(g, (8, 32)))
    fused = graph.FuseOps()(bb.finish())
    bodies = [str(p) for p in primitives(fused)]
    mm = [t for t in bodies if "linalg.matmul" in t]
    assert len(mm) == 1 and "expand_shape" not in mm[0] and "math.erf" not in mm[0]
    assert any("math.erf" in t for t in bodies)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    h = x.astype(np.float64) @ w + b
    matches_numpy(fused, 0.5 * h * (1 + erf(h / np.sqrt(2))), x, rtol=1e-4, atol=1e-4)


def test_primitive_functions_are_schedulable():
    mod, ref = mlp(batch=8, with_ref=True)
    fused = graph.FuseOps()(mod)
    prim = primitives(fused)[0].sym_name.value
    sch = mlc.Schedule(fused)
    blk = sch.get_block("dense", func_name=prim)
    i, j, k = sch.get_loops(blk)
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i, j0, k, j1)
    sch.reverse_compute_at(sch.get_block("dense.bias_add.fused", func_name=prim), j0)
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    matches_numpy(sch.mod, ref(x), x, rtol=1e-4, atol=1e-4)


def test_op_kinds():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 8))
        y = ops.matmul(ops.exp(x) + np.ones((1, 8), np.float32), np.ones((8, 3), np.float32))
        f.output(y)
    kinds = {o.operation.attributes["mlc.name"].value: op_kind(o.operation)
             for o in bb.finish().func_ops()[0].regions[0].blocks[0].operations
             if "mlc.name" in o.operation.attributes and o.operation.name != "arith.constant"}
    assert kinds == {"exp": "elementwise", "add": "broadcast", "matmul.init": "elementwise",
                     "matmul": "out_ewise_fusable"}


def test_multi_use_producer_is_not_duplicated():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 8))
        e = ops.exp(x)
        f.output(ops.relu(e) + ops.tanh(e))
    mod = bb.finish()
    fused = graph.FuseOps()(mod)
    assert str(fused).count("math.exp") == 1
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    matches_numpy(fused, np.maximum(np.exp(x), 0) + np.tanh(np.exp(x)), x)


def test_fold_constant_transposed_weight_and_dce():
    text = """
    func.func @main(%x: tensor<4x64xf32>) -> tensor<4x10xf32> {
      %w = arith.constant dense<0.5> : tensor<10x64xf32>
      %e = tensor.empty() : tensor<64x10xf32>
      %t = linalg.transpose {mlc.name = "wt"} ins(%w : tensor<10x64xf32>) outs(%e : tensor<64x10xf32>) permutation = [1, 0]
      %e2 = tensor.empty() : tensor<4x10xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e2 : tensor<4x10xf32>) -> tensor<4x10xf32>
      %r = linalg.matmul {mlc.name = "mm"} ins(%x, %t : tensor<4x64xf32>, tensor<64x10xf32>) outs(%f : tensor<4x10xf32>) -> tensor<4x10xf32>
      %dead = linalg.matmul {mlc.name = "dead"} ins(%x, %t : tensor<4x64xf32>, tensor<64x10xf32>) outs(%f : tensor<4x10xf32>) -> tensor<4x10xf32>
      return %r : tensor<4x10xf32>
    }"""
    mod = mlc.Module.parse(text)
    folded = graph.FoldConstant(mlc.compile)(mod)
    assert "linalg.transpose" not in str(folded) and "wt.folded" in str(folded)
    assert "linalg.fill" in str(folded)  # inits are not folded
    clean = graph.DeadCodeElimination()(folded)
    assert "dead" not in str(clean)
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    matches_numpy(clean, x @ np.full((64, 10), 0.5, np.float32), x, rtol=1e-5, atol=1e-4)


def test_fold_constant_data_movement_with_numpy_without_compiling():
    """Transposes, reshapes, slices and pads of weights fold with numpy: the evaluator (the
    compiler) is never called; the folded graph still matches numpy."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4, 3)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(5, 8))
        c = ops.constant(w, name="w")
        t = ops.reshape(ops.transpose(c, (2, 0, 1)), (3, 24))            # (3, 24)
        s = ops.pad(ops.slice(t, [1, 2], [3, 10], [1, 2]), [(1, 0), (0, 4)], 2.0)  # (3, 8)
        f.output(ops.matmul(x, ops.transpose(s, (1, 0))))                # (5, 3)
    mod = bb.finish()

    def no_compile(_m):
        raise AssertionError("the data-movement subgraph was compiled")

    folded = graph.FoldConstant(no_compile)(mod)
    text = str(folded)
    assert "linalg.transpose" not in text and "tensor.pad" not in text and "extract_slice" not in text
    ref_s = np.pad(w.transpose(2, 0, 1).reshape(3, 24)[1:3, 2:10:2], [(1, 0), (0, 4)], constant_values=2.0)
    xn = rng.standard_normal((5, 8)).astype(np.float32)
    matches_numpy(folded, xn @ ref_s.T, xn, rtol=1e-5, atol=1e-5)


def test_fold_constant_arithmetic_compiles_with_the_evaluator():
    """A subgraph with arithmetic (exp of a weight) is not data movement: it is compiled."""
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    calls = []

    def evaluate(m):
        calls.append(m)
        return mlc.compile(m)

    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(3, 4))
        f.output(ops.add(x, ops.exp(ops.transpose(ops.constant(w, name="w"), (0, 1)))))
    folded = graph.FoldConstant(evaluate)(bb.finish())
    assert len(calls) == 1 and "math.exp" not in str(folded)
    xn = np.ones((3, 4), np.float32)
    matches_numpy(folded, xn + np.exp(w), xn)


def test_dce_removes_unused_primitives_and_cse_merges():
    text = """
    func.func private @unused(%a: tensor<4xf32>) -> tensor<4xf32> attributes {mlc.primitive} {
      return %a : tensor<4xf32>
    }
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %e = tensor.empty() : tensor<4xf32>
      %a = linalg.exp ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      %b = linalg.exp ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      %c = linalg.add ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      return %c : tensor<4xf32>
    }"""
    mod = mlc.Module.parse(text)
    out = graph.Sequential([graph.DeadCodeElimination(), graph.CommonSubexprElimination()])(mod)
    assert "@unused" not in str(out)
    assert str(out).count("linalg.exp") == 1
    x = np.arange(4, dtype=np.float32)
    matches_numpy(out, 2 * np.exp(x), x)


def test_sequential_mixes_upstream_passes_and_dumps():
    buf = io.StringIO()
    seq = graph.Sequential([graph.FuseOps(), "func.func(canonicalize)", graph.DeadCodeElimination()],
                           print_ir_after="all", file=buf)
    mod, ref = mlp(with_ref=True)
    out = seq(mod)
    dumps = buf.getvalue()
    assert "IR Dump After mlc-fuse-ops" in dumps and "IR Dump After func.func(canonicalize)" in dumps
    assert [n for n, _ in seq.timings] == ["mlc-fuse-ops", "func.func(canonicalize)", "mlc-dce"]
    assert "mlc-fuse-ops" in seq.timing_report()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    matches_numpy(out, ref(x), x, rtol=1e-4, atol=1e-4)
    with pytest.raises(mlc.PipelineError, match="not a Pass"):
        graph.Sequential([3])


_UNARY = {"relu": lambda a: np.maximum(a, 0), "exp": np.exp, "tanh": np.tanh,
          "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "negative": np.negative}
_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum}


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_random_graphs_keep_results(data):
    """Random op graphs (elementwise, broadcasting, matmul) through the whole pass pipeline,
    evaluated alongside in numpy (float32)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    n = data.draw(st.sampled_from([4, 8]))
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = rng.standard_normal((n, 8)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with np.errstate(all="ignore"), bb.function("main") as f:
        vals = [f.arg("x", shape=(n, 8)), f.arg("y", shape=(n, 8))]
        refs = [x, y]
        for _ in range(data.draw(st.integers(2, 6))):
            kind = data.draw(st.sampled_from(["unary", "binary", "bcast", "matmul"]))
            i = data.draw(st.integers(0, len(vals) - 1))
            a, ra = vals[i], refs[i]
            if kind == "unary":
                op = data.draw(st.sampled_from(sorted(_UNARY)))
                vals.append(getattr(ops, op)(a))
                refs.append(_UNARY[op](ra).astype(np.float32))
            elif kind == "binary":
                j = data.draw(st.integers(0, len(vals) - 1))
                op = data.draw(st.sampled_from(sorted(_BINARY)))
                vals.append(getattr(ops, op)(a, vals[j]))
                refs.append(_BINARY[op](ra, refs[j]).astype(np.float32))
            elif kind == "bcast":
                c = rng.standard_normal((1, 8)).astype(np.float32)
                vals.append(ops.add(a, c))
                refs.append(ra + c)
            else:
                w = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
                vals.append(ops.matmul(a, w))
                refs.append(ra @ w)
        f.output(vals[-1])
    mod = bb.finish()
    seq = graph.Sequential([graph.FoldConstant(mlc.compile), graph.FuseOps(), graph.CommonSubexprElimination(),
                            graph.DeadCodeElimination()])
    out = seq(mod)
    # float32 rounding grows with the magnitudes seen along the way (exp, matmul)
    scale = max([1.0] + [float(np.abs(r[np.isfinite(r)]).max()) for r in refs if np.isfinite(r).any()])
    matches_numpy(out, refs[-1], x, y, rtol=1e-4, atol=1e-5 * scale)


def _np_conv2d(x, w, padding):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = h + 2 * padding - kh + 1, wd + 2 * padding - kw + 1
    out = np.zeros((n, f, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def _np_max_pool(x, k):
    n, c, h, w = x.shape
    oh, ow = (h - k) // k + 1, (w - k) // k + 1
    return x[:, :, :oh * k, :ow * k].reshape(n, c, oh, k, ow, k).max(axis=(3, 5))


def _np_softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def small_cnn(rng, with_ref=False):
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.3
    g, b, m, v = (rng.random(8).astype(np.float32) + 0.5 for _ in range(4))
    wd = rng.standard_normal((10, 8 * 2 * 2)).astype(np.float32) * 0.1
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 1, 8, 8))
        h = ops.relu(ops.batch_norm(ops.conv2d(x, w, padding=1), g, b, m, v))
        h = ops.flatten(ops.max_pool2d(h, 3, strides=3), start_dim=1)
        f.output(ops.softmax(ops.dense(h, wd, np.zeros(10, np.float32))))

    def ref(xn):
        c = (slice(None), None, None)
        h = (_np_conv2d(xn, w, 1) - m[c]) / np.sqrt(v[c] + 1e-5) * g[c] + b[c]
        h = _np_max_pool(np.maximum(h, 0), 3).reshape(2, -1)
        return _np_softmax(h @ wd.T)

    return (bb.finish(), ref) if with_ref else bb.finish()


def test_passes_keep_cnn_results():
    rng = np.random.default_rng(0)
    mod, ref = small_cnn(rng, with_ref=True)
    seq = graph.Sequential([graph.FoldConstant(mlc.compile), graph.FuseOps(), graph.CommonSubexprElimination(),
                            graph.DeadCodeElimination()])
    out = seq(mod)
    prims = primitives(out)
    # conv + batch_norm + relu in one primitive; pool; dense + bias; softmax pieces; the batch
    # norm's per-channel scale and shift are folded constants (no rsqrt is left)
    conv_prim = [str(p) for p in prims if "linalg.conv_2d_nchw_fchw" in str(p)]
    assert len(conv_prim) == 1 and "arith.maximumf" in conv_prim[0] and "arith.mulf" in conv_prim[0]
    assert "math.rsqrt" not in str(out)
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    want = ref(x)
    matches_numpy(out, want, x, rtol=1e-4)
    blas = graph.DispatchLibrary({"dense": "openblas.sgemm"})(out)
    assert 'callee = "openblas.sgemm"' in str(blas)
    matches_numpy(blas, want, x, rtol=1e-4)


def test_passes_keep_digits_mlp_predictions():
    from mlc_mlir.cli.demo import build_mlp_module, train_mlp

    clf, _, x_test, _, _ = train_mlp(0)
    ws = [w.astype(np.float32) for w in clf.coefs_]
    bs = [b.astype(np.float32) for b in clf.intercepts_]
    mod = build_mlp_module(ws, bs, (x_test.shape[0],))
    out = graph.Sequential([graph.FoldConstant(mlc.compile), graph.FuseOps(), graph.DeadCodeElimination()])(mod)
    fn = f"mlp_b{x_test.shape[0]}"
    x = np.ascontiguousarray(x_test, dtype=np.float32)
    want = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        want = want @ w + b
        want = np.maximum(want, 0) if i + 1 < len(ws) else want
    got = mlc.compile(out)[fn](x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == clf.predict(x_test)).all()
