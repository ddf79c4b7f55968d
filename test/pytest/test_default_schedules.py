"""Default schedules (``mlc_mlir.schedule.default_rules``): every op of the inventory, built with
the GraphBuilder, scheduled by its op kind's rule for a target, compiled and compared with numpy;
the same after ``graph.FuseOps`` (fused primitives, epilogues in their anchor's tiles); schedule
constants derived from the target; skipped kinds and errors."""

import dataclasses
import re

import numpy as np
import pytest
from scipy.special import erf

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.schedule.cpu_recipes import goto_params
from mlc_mlir.schedule.default_rules import (RULES, SKIPPED, apply_default_schedule, classify,
                                             default_schedule)
from mlc_mlir.target import host_target
from test_ops_nn import conv_ref, windows
from targets import AVX2, AVX512

F32 = "float32"
TOL = dict(rtol=1e-4, atol=1e-4)
#: The host with tiny caches: small test shapes then use threads (a thread needs an L1d of data)
#: and several cache blocks.
SMALL_CACHES = dataclasses.replace(host_target(), l1d_bytes=1 << 10, l2_bytes=8 << 10, cores=2)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _ln(x, g, b, eps=1e-5):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) * g + b


def _pool(x, k, s, p, fn, value):
    return fn(np.stack(windows(x, k, s, p, (1, 1), value)), axis=0)


def _conv(x, w, **kw):
    return conv_ref(x.astype(np.float64), w.astype(np.float64), **kw)


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


#: name -> (builder, input shapes, numpy reference, positive inputs)
CASES = {
    # elementwise / broadcast
    "add_relu_bcast": (lambda a, b: ops.relu(ops.add(a, b)), [(16, 96), (96,)],
                       lambda a, b: np.maximum(a + b, 0), False),
    "subtract_multiply": (lambda a, b: ops.multiply(ops.subtract(a, b), b), [(8, 64), (8, 64)],
                          lambda a, b: (a - b) * b, False),
    "divide_max_min": (lambda a, b: ops.minimum(ops.maximum(ops.divide(a, b), a), b),
                       [(4, 8, 32), (4, 8, 32)], lambda a, b: np.minimum(np.maximum(a / b, a), b), True),
    "unary_chain": (lambda x: ops.tanh(ops.sigmoid(ops.negative(ops.exp(x)))), [(1000,)],
                    lambda x: np.tanh(_sigmoid(-np.exp(x))), False),
    "log_sqrt_rsqrt": (lambda x: ops.add(ops.log(x), ops.multiply(ops.sqrt(x), ops.rsqrt(x))),
                       [(6, 40)], lambda x: np.log(x) + np.sqrt(x) / np.sqrt(x), True),
    "gelu_clip": (lambda x: ops.clip(ops.gelu(x), -0.5, 0.5), [(3, 5, 24)],
                  lambda x: np.clip(_gelu(x), -0.5, 0.5), False),
    "cast": (lambda x: ops.cast(ops.cast(x, "float64"), "float32"), [(16, 16)], lambda x: x, False),
    # contractions
    "matmul": (lambda a, b: ops.matmul(a, b), [(64, 48), (48, 80)], lambda a, b: a @ b, False),
    "matmul_odd": (lambda a, b: ops.matmul(a, b), [(6, 10), (10, 7)], lambda a, b: a @ b, False),
    "dense_bias_relu": (lambda x, w, b: ops.relu(ops.dense(x, w, b)), [(32, 40), (48, 40), (48,)],
                        lambda x, w, b: np.maximum(x @ w.T + b, 0), False),
    "dense_gemv": (lambda x, w: ops.dense(x, w), [(1, 64), (32, 64)], lambda x, w: x @ w.T, False),
    "batch_matmul_relu": (lambda a, b: ops.relu(ops.batch_matmul(a, b)), [(2, 16, 12), (2, 12, 32)],
                          lambda a, b: np.maximum(a @ b, 0), False),
    "batch_matmul_one": (lambda a, b: ops.batch_matmul(a, b), [(1, 32, 8), (1, 8, 24)],
                         lambda a, b: a @ b, False),
    # convolution
    "conv2d_pad": (lambda x, w: ops.conv2d(x, w, padding=1), [(1, 4, 10, 10), (8, 4, 3, 3)],
                   lambda x, w: _conv(x, w, padding=1), False),
    "conv2d_bias_relu": (lambda x, w, b: ops.relu(ops.conv2d(x, w, b, padding=1)),
                         [(2, 3, 9, 16), (8, 3, 3, 3), (8,)],
                         lambda x, w, b: np.maximum(_conv(x, w, padding=1) + b[None, :, None, None], 0),
                         False),
    "conv2d_stride_dil": (lambda x, w: ops.conv2d(x, w, strides=(2, 2), dilation=(2, 2), padding=2),
                          [(2, 3, 13, 13), (6, 3, 3, 3)],
                          lambda x, w: _conv(x, w, strides=(2, 2), dilation=(2, 2), padding=2), False),
    "conv2d_groups_bias_relu": (lambda x, w, b: ops.relu(ops.conv2d(x, w, b, padding=1, groups=2)),
                                [(1, 4, 8, 8), (6, 2, 3, 3), (6,)],
                                lambda x, w, b: np.maximum(_conv(x, w, padding=1, groups=2)
                                                           + b[None, :, None, None], 0), False),
    "conv2d_depthwise": (lambda x, w: ops.conv2d(x, w, padding=1, groups=4), [(1, 4, 8, 8), (4, 1, 3, 3)],
                         lambda x, w: _conv(x, w, padding=1, groups=4), False),
    # pooling
    "max_pool2d": (lambda x: ops.max_pool2d(x, (3, 3), (2, 2), padding=1), [(1, 8, 12, 12)],
                   lambda x: _pool(x, (3, 3), (2, 2), 1, np.max, -np.inf), False),
    "max_pool2d_s1": (lambda x: ops.max_pool2d(x, (3, 3), (1, 1), padding=1), [(1, 4, 9, 16)],
                      lambda x: _pool(x, (3, 3), (1, 1), 1, np.max, -np.inf), False),
    "avg_pool2d": (lambda x: ops.avg_pool2d(x, (2, 2), (2, 2)), [(2, 4, 8, 8)],
                   lambda x: _pool(x, (2, 2), (2, 2), 0, np.mean, 0), False),
    "global_avg_pool2d": (lambda x: ops.global_avg_pool2d(x), [(2, 16, 7, 7)],
                          lambda x: x.mean(axis=(2, 3), keepdims=True), False),
    # normalization, softmax
    "softmax": (lambda x: ops.softmax(x), [(16, 200)], _softmax, False),
    "softmax_axis0": (lambda x: ops.softmax(x, axis=0), [(24, 16)], lambda x: _softmax(x, 0), False),
    "log_softmax": (lambda x: ops.log_softmax(x), [(8, 64)], lambda x: np.log(_softmax(x)), False),
    "layer_norm": (lambda x, g, b: ops.layer_norm(x, g, b), [(16, 96), (96,), (96,)], _ln, False),
    "batch_norm": (lambda x, g, b, m, v: ops.batch_norm(x, g, b, m, v),
                   [(2, 8, 5, 5), (8,), (8,), (8,), (8,)],
                   lambda x, g, b, m, v: (x - m[:, None, None]) / np.sqrt(np.abs(v)[:, None, None] + 1e-5)
                   * g[:, None, None] + b[:, None, None], "var"),
    # reductions
    "sum_rows": (lambda x: ops.sum(x, axis=1), [(32, 100)], lambda x: x.sum(1), False),
    "sum_cols": (lambda x: ops.sum(x, axis=0), [(32, 48)], lambda x: x.sum(0), False),
    "mean_keepdims": (lambda x: ops.mean(x, axis=-1, keepdims=True), [(4, 6, 64)],
                      lambda x: x.mean(-1, keepdims=True), False),
    "max_min_all": (lambda x: ops.add(ops.max(x, axis=1), ops.min(x, axis=1)), [(8, 256)],
                    lambda x: x.max(1) + x.min(1), False),
    "sum_all": (lambda x: ops.sum(x), [(16, 64)], lambda x: np.array(x.sum()), False),
    "argmax": (lambda x: ops.argmax(x, axis=1), [(16, 50)], lambda x: x.argmax(1), False),
    # shape ops
    "transpose_permute": (lambda x: ops.permute(ops.transpose(x, (0, 2, 1)), (1, 0, 2)), [(3, 4, 40)],
                          lambda x: x.transpose(0, 2, 1).transpose(1, 0, 2), False),
    "reshape_flatten": (lambda x: ops.relu(ops.flatten(ops.reshape(x, (4, 6, 8)), 1)), [(8, 24)],
                        lambda x: np.maximum(x.reshape(4, 48), 0), False),
    "concat_slice_pad": (lambda a, b: ops.pad(ops.slice(ops.concat([a, b], axis=1), [0, 2], [8, 30]),
                                              [(1, 1), (0, 2)]),
                         [(8, 16), (8, 16)],
                         lambda a, b: np.pad(np.concatenate([a, b], 1)[:, 2:30], [(1, 1), (0, 2)]), False),
    "broadcast_to": (lambda x: ops.exp(ops.broadcast_to(x, (16, 32))), [(1, 32)],
                     lambda x: np.exp(np.broadcast_to(x, (16, 32))), False),
}


def build(name):
    fn, shapes, _, _ = CASES[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"a{i}", shape=s, dtype=F32) for i, s in enumerate(shapes)]))
    return bb.finish()


def inputs(name):
    _, shapes, _, positive = CASES[name]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if positive is True:
        xs = [np.abs(x) + 0.5 for x in xs]
    elif positive == "var":
        xs[-1] = np.abs(xs[-1])
    return xs


def check(name, mod, target, threads=None):
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, threads)
    xs = inputs(name)
    got = mlc.compile(sch.mod)(*xs)
    ref = CASES[name][2](*[x.astype(np.float64) for x in xs])
    np.testing.assert_allclose(np.asarray(got, np.float64), ref, **TOL)
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)
    return sch


@pytest.mark.parametrize("name", list(CASES))
def test_op_default_schedule(name):
    check(name, build(name), SMALL_CACHES)


@pytest.mark.parametrize("name", ["add_relu_bcast", "dense_bias_relu", "batch_matmul_relu",
                                  "conv2d_bias_relu", "conv2d_groups_bias_relu", "max_pool2d", "softmax", "layer_norm",
                                  "sum_cols", "argmax", "global_avg_pool2d"])
def test_fused_primitives(name):
    mod = graph.FuseOps()(build(name))
    assert any(f.attributes.__contains__("mlc.primitive") for f in mod.func_ops())
    check(name, mod, SMALL_CACHES)


@pytest.mark.parametrize("name, threads", [("matmul", 1), ("softmax", 1), ("dense_bias_relu", 2)])
def test_host_target_and_thread_override(name, threads):
    # the host's ISA with tiny caches: the small test shapes are worth threads
    sch = check(name, build(name), SMALL_CACHES, threads)
    parallel = any(lp.kind == "parallel" for b in sch.model.blocks for lp in b.loops)
    assert parallel == (threads > 1)


def test_rules_use_their_primitives():
    """The matmul's epilogues are fused (reverse_compute_at), B is packed, the tile vectorized;
    the row reduction is factorized into a vector; the elementwise op is parallel + vectorized."""
    sch = check("dense_bias_relu", build("dense_bias_relu"), SMALL_CACHES)
    kinds = [i.kind for i in sch.trace.insts]
    assert kinds.count("reverse_compute_at") == 2 and "cache_read" in kinds and "vectorize" in kinds
    assert "parallel" in kinds
    sch = check("conv2d_bias_relu", build("conv2d_bias_relu"), SMALL_CACHES)
    kinds = [i.kind for i in sch.trace.insts]
    assert kinds.count("reverse_compute_at") == 2 and kinds.count("unroll") == 2
    sch = check("max_pool2d_s1", build("max_pool2d_s1"), SMALL_CACHES)
    assert "vectorize" in [i.kind for i in sch.trace.insts]
    sch = check("sum_rows", build("sum_rows"), SMALL_CACHES)
    assert {"rfactor", "vectorize", "parallel"} <= {i.kind for i in sch.trace.insts}
    sch = check("add_relu_bcast", build("add_relu_bcast"), SMALL_CACHES)
    blk = sch.get(sch.get_block("add"))
    assert [lp.kind for lp in blk.loops] == ["parallel", "serial", "serial", "vectorized"]
    # the relu runs on each vector tile of the add (its epilogue)
    assert [e.name for e in sch.model.epilogues(blk)] == ["relu"]
    lanes = SMALL_CACHES.vector_lanes(32)
    assert blk.loops[-1].extent == max(v for v in range(lanes, 4 * lanes + 1, lanes) if 96 % v == 0)


def test_batch_matmul_zeroes_each_register_tile():
    """An unpadded batch_matmul (its relu fused) decomposes its init into the k loop: each
    register tile of C is zeroed right before its k loop, not all of C by a fill before the
    threads' loop; a padded one (N = 24, no whole 16-wide tile on AVX2) keeps its fill. Both
    match numpy and replay (:func:`check`)."""
    sch = check("batch_matmul_relu", build("batch_matmul_relu"), SMALL_CACHES)
    insts = sch.trace.insts
    dec = [n for n, i in enumerate(insts) if i.kind == "decompose_reduction"]
    assert len(dec) == 1
    # at the k loop: after the loops are reordered and the threads' loop is made parallel
    assert dec[0] > max(n for n, i in enumerate(insts) if i.kind in ("reorder", "parallel"))
    sch = check("batch_matmul_one", build("batch_matmul_one"), SMALL_CACHES)
    assert "pad_einsum" in [i.kind for i in sch.trace.insts]
    assert "decompose_reduction" not in [i.kind for i in sch.trace.insts]

def test_constants_follow_the_target():
    a, b = goto_params(AVX2, 1024, 1024, 1024), goto_params(AVX512, 1024, 1024, 1024)
    # NR: two vectors; MR: accumulators in half the registers; KC: B micro-panel in L1d;
    # NC: packed B panel in L2
    assert (a.nr, a.mr, a.kc, a.nc) == (16, 4, 512, 256)
    assert (b.nr, b.mr, b.kc, b.nc) == (32, 8, 256, 2048)
    assert a.mr * (a.nr // 8) <= AVX2.vector_registers // 2
    assert goto_params(AVX2, 1024, 1024, 1024, dtype_bits=64).nr == 8
    # threads: the cores, lowered until they divide M with MR rows each
    # 6 rows cannot be split between 2 threads; 64 columns can (2 x NR = 32 divides them)
    assert a.threads == 2 and goto_params(AVX2, 6, 48, 64).threads == 1
    assert goto_params(AVX2, 6, 64, 64).threads == 2
    assert goto_params(dataclasses.replace(AVX2, cores=3), 1023, 64, 64).threads == 3
    # a GEMV splits N by the recipe's tile: 2 x 25 columns divide 1000 (NR = 32 does not)
    assert goto_params(AVX512, 1, 1000, 512).threads == 2 and goto_params(AVX512, 1, 1001, 512).threads == 1
    # the schedules differ accordingly
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(64, 64)), f.arg("b", shape=(64, 64))))
    mod = bb.finish()
    tiles = {}
    for t in (AVX2, AVX512):
        sch = mlc.Schedule(mod)
        apply_default_schedule(sch, t)
        blk = sch.get(sch.get_block("matmul"))
        tiles[t.vector_bits] = [lp.extent for lp in blk.loops if lp.kind == "vectorized"]
    assert tiles == {256: [4, 16], 512: [8, 32]}


def test_threaded_gemv_matches_numpy():
    """A classifier's GEMV (1 x 512 @ 512 x 1000 + bias, constant weights) on 2 threads, N split
    between them (ResNet-18's fc), against numpy."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((512, 1000)).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(ops.matmul(f.arg("x", shape=(1, 512)), w), b))
    x = rng.standard_normal((1, 512)).astype(np.float32)
    got = mlc.compile(bb.finish(), threads=2)(x)
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-4, atol=1e-4)


def test_classify_and_skipped_kinds():
    sch = mlc.Schedule(build("conv2d_groups_bias_relu"))
    kinds = {k[1]: classify(info) for k, info in sch.model.ops.items()}
    assert set(kinds.values()) <= set(RULES) | set(SKIPPED)
    assert kinds["conv2d.init"] == "fill"
    assert "elementwise" in kinds.values()


def test_errors_name_the_rule():
    mod = build("matmul")
    with pytest.raises(ScheduleError, match="expected a cpu Target"):
        default_schedule(mod, "cpu")
    with pytest.raises(ScheduleError, match="threads=0"):
        default_schedule(mod, AVX2, threads=0)
    with pytest.raises(ScheduleError, match="goto_params: argument 'target'"):
        goto_params("avx2", 4, 4, 4)


def test_default_schedule_returns_a_module():
    mod = build("softmax")
    out = default_schedule(mod, SMALL_CACHES, threads=2)
    assert isinstance(out, mlc.Module) and "vector." in str(out) and "scf.forall" in str(out)
    xs = inputs("softmax")
    np.testing.assert_allclose(mlc.compile(out)(*xs), _softmax(xs[0].astype(np.float64)), **TOL)


@pytest.mark.parametrize("dtype", ["int32", "float64", "float16"])
def test_matmul_relu_dtypes(dtype):
    """Lanes and NR follow the element width (float64: 4 lanes on AVX2, NR = 8)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", shape=(32, 16), dtype=dtype), f.arg("b", shape=(16, 48), dtype=dtype)
        f.output(ops.relu(ops.matmul(a, b)))
    mod = bb.finish()
    rng = np.random.default_rng(0)
    x, y = rng.integers(-3, 4, (32, 16)).astype(dtype), rng.integers(-3, 4, (16, 48)).astype(dtype)
    got = mlc.compile(default_schedule(mod, SMALL_CACHES))(x, y)
    np.testing.assert_array_equal(got.astype(np.float64), np.maximum(x.astype(np.float64) @ y, 0))


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_epilogue_zeroes_its_tile_in_place(rng, tmp_path, threads):
    """A dense whose input is computed (layer norm) and whose output has an epilogue (bias +
    GELU): the init is fused into the epilogue's tile (decompose_reduction inside the NC loop),
    so no tile of C is copied from a C zeroed whole (memrefCopy) and C is not zeroed up front."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    w = rng.standard_normal((512, 64)).astype(np.float32) / 8
    b = rng.standard_normal(512).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=x.shape, dtype="float32")
        h = ops.layer_norm(a, ops.constant(np.ones(64, np.float32)), ops.constant(np.zeros(64, np.float32)))
        f.output(ops.gelu(ops.add(ops.dense(h, ops.constant(w)), ops.constant(b)), approximate="none"))
    exe = mlc.compile(bb.finish(), threads=threads, dump_ir=str(tmp_path))
    lowered = (tmp_path / "07-lower.mlir").read_text()
    assert "memrefCopy" not in lowered
    y = _ln(x.astype(np.float64), 1.0, 0.0) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(exe(x), 0.5 * y * (1 + erf(y / np.sqrt(2))), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n,k,threads", [(3072, 96, 1), (2304, 96, 2), (1000, 96, 2), (40, 96, 1),
                                         (1001, 777, 2), (17, 4099, 1), (50257 // 7, 64, 2), (1, 96, 1)])
def test_gemv_rule_for_one_row_matmuls(n, k, threads):
    """(1, K) @ (K, N): the GEMV recipe where N has at least one vector (B streamed row by row:
    a vectorized tile of rows x columns innermost, the rows a divisor of K, parallel over N;
    partial column tiles at odd N), else the Goto recipe; both match numpy at odd N and K."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", (1, k)), f.arg("w", (k, n))
        f.output(ops.matmul(x, w))
    mod = bb.finish()
    sch = apply_default_schedule(mlc.Schedule(mod), AVX512, threads)
    loops = sch.get(sch.get_block("matmul")).loops
    lanes = AVX512.vector_lanes(32)
    tile = [(lp.dim, lp.extent) for lp in loops if lp.kind == "vectorized"]
    if n >= lanes:
        rows = max(r for r in range(1, 9) if k % r == 0)
        assert tile == [(2, rows)] * (rows > 1) + [(1, 64 if n >= 64 else lanes)], loops
        assert any(lp.kind == "parallel" for lp in loops) == (threads > 1), loops
    else:
        assert tile[0][0] == 0, loops   # the Goto nest: M vectorized in the register tile
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((1, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    got = mlc.compile(mod, threads=threads)(xa, wa)
    np.testing.assert_allclose(got, xa.astype(np.float64) @ wa, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("n,k,threads", [(256, 4096, 2), (37, 515, 1), (1001, 96, 2), (3, 64, 1), (5, 4099, 1)])
def test_gemv_rows_rule_for_one_row_dense(n, k, threads):
    """(1, K) @ (N, K)^T (``dense`` at M = 1, ``W @ x`` with W row-major): one row reduction per
    output (K split into vector tiles and factorized, the tile vectorized, rows split over the
    threads, the last slice partial at odd N) where a vector tile divides K, else the Goto recipe; both
    match numpy at odd N and K."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", (1, k)), f.arg("w", (n, k))
        f.output(ops.dense(x, w))
    mod = bb.finish()
    sch = apply_default_schedule(mlc.Schedule(mod), AVX512, threads)
    blk = sch.get(sch.get_block("dense"))
    tile = [(lp.dim, lp.extent) for lp in blk.loops if lp.kind == "vectorized"]
    cands = [v * 16 for v in (1, 2, 3, 4) if k % (v * 16) == 0 and v * 16 < k]
    if cands:
        assert blk.rfactor is not None and tile == [(2, max(cands))], blk.loops
        assert any(lp.kind == "parallel" for lp in blk.loops) == (threads > 1)
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((1, k), dtype=np.float32), rng.standard_normal((n, k), dtype=np.float32)
    got = mlc.compile(mod, threads=threads)(xa, wa)
    np.testing.assert_allclose(got, xa.astype(np.float64) @ wa.T, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("rule, dims", [("schedule_matmul", "(i, j, k)"),
                                        ("schedule_batch_matmul", "(b, i, j, k)")])
def test_matmul_rules_name_the_dims_they_expect(rule, dims):
    """A contraction rule given a block of another rank says which rule, which block and which
    dims it expected (rules.common.rule_block)."""
    from mlc_mlir.schedule.rules import matmul
    from mlc_mlir.schedule.rules.common import RuleContext
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(4, 8))))
    sch = mlc.Schedule(bb.finish())
    ctx = RuleContext(host_target(), 1, {})
    with pytest.raises(ScheduleError, match=r"rule \w+: 'relu' has 2 dims; expected " + re.escape(dims)):
        getattr(matmul, rule)(sch, sch.get_block("relu"), ctx)


@pytest.mark.parametrize("shape", [(5, 5), (7, 3), (4, 16)])
def test_identity_copy_is_left_to_the_cleanup(shape):
    """A broadcast_to of the same shape is an identity copy: the cleanup canonicalization that
    the matmul's peeled tiles bring erases it, so no rule holds a handle to it (it used to fail
    with 'tracking listener failed to find replacement op'); one also ends a matmul's epilogue
    chain."""
    m, n = shape
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=shape, dtype=F32)
        b = f.arg("b", shape=(n, n), dtype=F32)
        y = ops.broadcast_to(ops.add(a, a), shape)
        f.output(ops.multiply(y, a), ops.subtract(y, a), ops.relu(ops.broadcast_to(ops.matmul(a, b), shape)))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    kinds = {k[1]: classify(info) for k, info in sch.model.ops.items()}
    assert kinds["broadcast_to"] == kinds["broadcast_to_1"] == "identity" and kinds["add"] == "elementwise"
    rng = np.random.default_rng(0)
    xa, xb = rng.standard_normal(shape).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    got = mlc.compile(mod)(xa, xb)
    want = [2 * xa * xa, xa, np.maximum(xa.astype(np.float64) @ xb, 0)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, **TOL)


@pytest.mark.parametrize("threads", [1, 2])
def test_elementwise_chain_runs_on_each_vector_tile(tmp_path, threads):
    """A chain of elementwise ops over one shape (a GEMM's epilogue unit: scale + shift, residual
    add, relu): the first op's rule takes the others as epilogues (``reverse_compute_at`` at its
    vector-tile loop), so the unit is one loop nest (one ``scf.forall`` with two threads) and
    writes one result instead of one buffer per op."""
    rng = np.random.default_rng(0)
    x, r = (rng.standard_normal((1, 28, 28, 512)).astype(np.float32) for _ in range(2))
    s, b = rng.standard_normal(512).astype(np.float32), rng.standard_normal(512).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, res = f.arg("x", shape=x.shape), f.arg("r", shape=r.shape)
        y = ops.add(ops.multiply(a, ops.constant(s)), ops.constant(b))
        f.output(ops.relu(ops.add(y, res)))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX512, threads)
    first = sch.get(sch.get_block("multiply"))
    assert [e.name for e in sch.model.epilogues(first)] == ["add", "add_1", "relu"]
    exe = mlc.compile(mod, threads=threads, dump_ir=str(tmp_path))
    scheduled = (tmp_path / "06-prepare.mlir").read_text()
    assert scheduled.count("scf.forall (") == (1 if threads > 1 else 0)
    assert scheduled.count("scf.for ") <= 4   # n, oh, ow and the vector tiles: one nest
    np.testing.assert_allclose(exe(x, r), np.maximum(x * s + b + r, 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, threads", [((7, 9, 512), 2), ((7, 9, 512), 3), ((1, 7, 7, 3, 3, 64), 2),
                                           ((8, 9, 512), 2), ((7, 9, 512), 1)])
def test_elementwise_odd_rows_split_unevenly_over_the_threads(tmp_path, shape, threads):
    """An all-parallel block whose extents the threads divide only where it would fork once
    per row (ResNet-50's last-stage im2col copy: 1 x 7 x 7 x 3 x 3 x C) splits its first
    loop of rows unevenly (7 rows over 2 threads: 4 and 3, a partial last chunk) instead of
    running on one thread; where the threads divide it (8 rows) the split is even. As numpy's."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, y = f.arg("a", shape=shape), f.arg("b", shape=shape)
        f.output(ops.relu(ops.add(x, y)))
    mod = bb.finish()
    exe = mlc.compile(mod, threads=threads, dump_ir=str(tmp_path))
    scheduled = (tmp_path / "03-schedule.mlir").read_text()
    rows = next(e for e in shape if e > 1)
    assert scheduled.count("scf.forall (") == (threads > 1)
    assert ("affine.min" in scheduled) == (threads > 1 and rows % threads != 0)
    np.testing.assert_allclose(exe(a, b), np.maximum(a + b, 0), rtol=1e-6, atol=1e-6)


def test_padded_gemm_epilogue_over_odd_rows_with_two_threads():
    """ONNX Conv 1x1 + BatchNormalization of a 7x7 map (49 rows: the packed GEMM pads them,
    its batch norm keeps its own rule) with two threads: the batch norm splits its 49 rows
    unevenly over the threads (25 and 24, rows one at a time: nothing to peel; light
    ResNet-50's downsampling 1024 -> 2048 convolution failed to compile when they were
    peeled); as onnxruntime's."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    c, f = 1024, 2048
    x = rng.standard_normal((1, c, 7, 7)).astype(np.float32)
    inits = [numpy_helper.from_array((rng.standard_normal((f, c, 1, 1)) / 32).astype(np.float32), "w")]
    for name, v in (("s", rng.uniform(0.5, 1.5, f)), ("b", rng.standard_normal(f)),
                    ("m", rng.standard_normal(f) / 4), ("v", rng.uniform(0.5, 1.5, f))):
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
    graph_ = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"]),
         helper.make_node("BatchNormalization", ["y", "s", "b", "m", "v"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, f, 7, 7))], inits)
    model = helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 13)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(mlc.compile(mlc.from_onnx(model), threads=2)(x), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("m, k, n", [(100, 27, 20), (1000, 27, 40), (289, 64, 17)])
def test_one_full_column_tile_and_an_edge_bufferize(target, m, k, n):
    """A matmul whose columns are one full register tile plus a partial one, under a tiled row
    loop: the partial tile's loop is not peeled into a one-tile main loop (whose folded slice of
    the output tile one-shot bufferization cannot write in place); it lowers for AVX2 and AVX-512
    targets and matches numpy on the host."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((k, n)).astype(np.float32)

    def build():
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.matmul(f.arg("x", shape=(m, k)), w))
        return bb.finish()
    run_stages(build(), CompileOptions(target, threads=2), until="lower")
    x = rng.standard_normal((m, k)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(build(), threads=2)(x), x @ w, **TOL)


@pytest.mark.parametrize("target, avx2", [(AVX2, True), (AVX512, False)])
def test_permuting_copy_tiles_follow_the_target(target, avx2):
    """An NHWC -> NCHW copy runs as register-tile transposes: 8 x 8 tiles lowered by MLIR's
    AVX2 patterns where the target has 8 float32 lanes and AVX2 (the block annotated, the
    script asking for the AVX2 lowering), 8 x 16 tiles with the generic lowering on AVX-512;
    both match numpy and replay."""
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 64)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.permute(f.arg("x", shape=x.shape), (0, 3, 1, 2)))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, 1)
    (blk,) = sch.model.blocks
    vec = next(i for i, lp in enumerate(blk.loops) if lp.kind == "vectorized")
    assert tuple(lp.extent for lp in blk.loops[vec:]) == ((8, 8) if avx2 else (8, 16))
    assert ("mlc.avx2_transpose" in str(sch.trace)) == avx2
    assert ("avx2_lowering_strategy = true" in str(sch.transform_script())) == avx2
    np.testing.assert_array_equal(mlc.compile(sch.mod)(x), x.transpose(0, 3, 1, 2))
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)
