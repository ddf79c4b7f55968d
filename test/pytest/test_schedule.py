"""Schedule primitives: numerics preserved vs numpy, traces round-trip and replay, the exported
transform script gives the same IR in upstream mlir-opt, errors name the primitive."""


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from targets import AVX2
from mlir_opt_replay import applied_in_mlir_opt


def matmul_module(m=64, n=64, k=32):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=(m, k))
        b = f.arg("b", shape=(k, n))
        f.output(ops.matmul(a, b))
    return bb.finish()


def dense_relu_module(m=32, k=48, n=64, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(m, k))
        f.output(ops.relu(ops.dense(x, w, b)))
    return bb.finish(), (lambda xn: np.maximum(xn @ w.T + b, 0))


def run_matmul(mod, m=64, n=64, k=32, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def assert_replays(sch, mod):
    """JSON round trip and replay give the identical transform script and payload."""
    t2 = mlc.Trace.from_json(sch.trace.as_json())
    assert t2 == sch.trace
    replayed = mlc.Schedule.from_trace(mod, t2)
    assert replayed.trace == sch.trace
    assert str(replayed.as_transform_script()) == str(sch.trace.as_transform_script())
    assert str(replayed.mod) == str(sch.mod)


def test_seed_walkthrough_split_reorder_decompose():
    mod = matmul_module(128, 128, 128)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul", func_name="main")
    i, j, k = sch.get_loops(blk)
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(i, j0, k, j1)
    init = sch.decompose_reduction(blk, k)
    text = str(sch.trace)
    assert "l4, l5 = sch.split(l2, factors=[None, 4])" in text
    assert "sch.reorder(l1, l4, l3, l5)" in text
    assert "decompose_reduction(b0, l3)" in text
    script = str(sch.transform_script())
    assert "transform.structured.fuse" in script and "tile_sizes [0, 4, 0]" in script
    payload = str(sch.mod)
    # the init (fill) sits inside the i and j0 loops, right above the k loop
    assert payload.index("linalg.fill") < payload.index("linalg.matmul")
    assert payload.count("scf.for") == 3
    assert repr(init).startswith("BlockRV")
    run_matmul(sch.mod, 128, 128, 128)
    assert_replays(sch, mod)


def test_trace_python_text_recreates_schedule():
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [4, None])
    sch.parallel(i0)
    sch.vectorize(i1)
    env = {}
    exec(str(sch.trace), env)
    sch2 = mlc.Schedule(mod)
    env["apply_trace"](sch2)
    assert sch2.trace == sch.trace


def test_exported_script_runs_in_upstream_mlir_opt(tmp_path):
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    sch.vectorize(i1)
    assert applied_in_mlir_opt(mod, sch, tmp_path) == str(sch.mod).strip()


@pytest.mark.parametrize("prims", [
    "split_reorder", "parallel", "vectorize", "unroll", "fuse", "rfactor", "annotate",
])
def test_primitive_preserves_matmul_numerics(prims):
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    if prims == "split_reorder":
        i0, i1 = sch.split(i, [None, 8])
        sch.reorder(k, i0, j, i1)
    elif prims == "parallel":
        i0, i1 = sch.split(i, [2, None])
        sch.parallel(i0)
        assert "scf.forall" in str(sch.mod)
    elif prims == "vectorize":
        j0, j1 = sch.split(j, [None, 16])
        sch.reorder(i, j0, k, j1)
        sch.vectorize(k)
        assert "vector." in str(sch.mod)
    elif prims == "unroll":
        k0, k1 = sch.split(k, [None, 4])
        sch.unroll(k1)
        assert str(sch.mod).count("linalg.matmul") == 4
    elif prims == "fuse":
        f = sch.fuse(i, j)
        sch.parallel(f)
        assert "scf.forall (%arg2, %arg3) in (64, 64)" in str(sch.mod)
    elif prims == "rfactor":
        k0, k1 = sch.split(k, [None, 8])
        sch.rfactor(k1)
        assert "linalg.reduce" in str(sch.mod) or "reduction" in str(sch.mod)
    elif prims == "annotate":
        i0, i1 = sch.split(i, [None, 8])
        sch.annotate(i0, "mlc.hint", 7)
        sch.annotate(blk, "mlc.tag", "hot")
        assert 'mlc.hint = 7' in str(sch.mod) and 'mlc.tag = "hot"' in str(sch.mod)
    run_matmul(sch.mod)
    assert_replays(sch, mod)


def test_reverse_compute_at_fuses_epilogue_into_tile():
    mod, ref = dense_relu_module()
    sch = mlc.Schedule(mod)
    d = sch.get_block("dense")
    i, j, k = sch.get_loops(d)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    sch.reverse_compute_at(sch.get_block("dense.bias_add"), j0)
    sch.reverse_compute_at(sch.get_block("relu"), j0)
    sch.vectorize(i1)
    text = str(sch.mod)
    forall = text.index("scf.forall")
    assert forall < text.index("arith.maximumf")  # relu inside the tile loops
    x = np.random.default_rng(1).standard_normal((32, 48)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x), ref(x), rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


def test_compute_at_producer_into_consumer_loop():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=(32, 16))
        b = f.arg("b", shape=(16, 24))
        f.output(ops.matmul(ops.exp(a), b))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    mm = sch.get_block("matmul")
    i, j, k = sch.get_loops(mm)
    i0, i1 = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("exp"), i0)
    text = str(sch.mod)
    assert text.index("scf.for") < text.index("math.exp")
    rng = np.random.default_rng(0)
    an = rng.standard_normal((32, 16)).astype(np.float32)
    bn = rng.standard_normal((16, 24)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(an, bn), np.exp(an) @ bn, rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


CONV = """
func.func @main(%x: tensor<1x8x18x18xf32>, %w: tensor<16x8x3x3xf32>) -> tensor<1x16x16x16xf32> {
  %e = tensor.empty() : tensor<1x16x16x16xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill {mlc.name = "conv.init"} ins(%z : f32) outs(%e : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %r = linalg.conv_2d_nchw_fchw {mlc.name = "conv", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
       ins(%x, %w : tensor<1x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%f : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  return %r : tensor<1x16x16x16xf32>
}"""


def _conv_ref(x, w):
    out = np.zeros((1, 16, 16, 16), np.float32)
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,fc->nfhw", x[:, :, kh:kh + 16, kw:kw + 16], w[:, :, kh, kw])
    return out


def test_conv2d_schedule():
    mod = mlc.Module.parse(CONV)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("conv")
    n, f, h, w, c, kh, kw = sch.get_loops(blk)
    f0, f1 = sch.split(f, [None, 8])
    w0, w1 = sch.split(w, [None, 8])
    sch.reorder(n, f0, h, w0, c, kh, kw, f1, w1)
    sch.parallel(f0)
    sch.decompose_reduction(blk, c)
    sch.vectorize(f1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 18, 18)).astype(np.float32)
    wt = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x, wt), _conv_ref(x, wt), rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


def test_elementwise_and_reduction_schedules():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 128))
        f.output(ops.tanh(x) * 2.0)
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    t = sch.get_block("tanh")
    i, j = sch.get_loops(t)
    i0, i1 = sch.split(i, [2, None])
    j0, j1 = sch.split(j, [None, 16])
    sch.parallel(i0)
    sch.vectorize(j1)
    m = sch.get_block("multiply")
    a, b = sch.get_loops(m)
    sch.unroll(sch.split(b, [None, 4])[1])
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x), np.tanh(x) * 2, rtol=1e-5, atol=1e-5)
    assert_replays(sch, mod)

    red = """
    #map = affine_map<(d0, d1) -> (d0, d1)>
    #map1 = affine_map<(d0, d1) -> (d0)>
    func.func @main(%x: tensor<32x256xf32>) -> tensor<32xf32> {
      %e = tensor.empty() : tensor<32xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill {mlc.name = "sum.init"} ins(%z : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
      %r = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]}
           ins(%x : tensor<32x256xf32>) outs(%f : tensor<32xf32>) attrs = {mlc.name = "sum"} {
      ^bb0(%a: f32, %acc: f32):
        %s = arith.addf %a, %acc : f32
        linalg.yield %s : f32
      } -> tensor<32xf32>
      return %r : tensor<32xf32>
    }"""
    rmod = mlc.Module.parse(red)
    sch = mlc.Schedule(rmod)
    s = sch.get_block("sum")
    i, k = sch.get_loops(s)
    k0, k1 = sch.split(k, [None, 16])
    sch.rfactor(k1)
    sch.parallel(sch.split(i, [2, None])[0])
    x = np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x), x.sum(axis=1), rtol=1e-4, atol=1e-4)
    assert_replays(sch, rmod)


def test_sampling_knobs_and_replay_with_other_decisions():
    mod = matmul_module()
    sch = mlc.Schedule(mod, seed=3)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    fi = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)
    i0, i1 = sch.split(i, fi)
    c = sch.sample_categorical([2, 4], [0.5, 0.5])
    k0, k1 = sch.split(k, [None, c])
    assert fi[1] <= 16 and int(fi[0]) * int(fi[1]) == 64
    script = str(sch.transform_script())
    assert 'transform.tune.knob<"matmul.i.tile1">' in script
    # the knob of i's tile size offers what max_innermost_factor allows
    assert "from options = [1, 2, 4, 8, 16] ->" in script
    run_matmul(sch.mod)
    assert_replays(sch, mod)
    idx = next(n for n, inst in enumerate(sch.trace.insts) if inst.kind == "sample_perfect_tile")
    other = mlc.Schedule.from_trace(mod, sch.trace, decisions={idx: [8, 8]})
    assert other.get(other.get_loops(other.get_block("matmul"))[1]).extent == 8
    run_matmul(other.mod)
    with pytest.raises(ScheduleError, match="not a 2-way perfect tiling"):
        mlc.Schedule.from_trace(mod, sch.trace, decisions={idx: [3, 5]})
    with pytest.raises(ScheduleError, match="innermost factor 32; expected <= max_innermost_factor=16"):
        mlc.Schedule.from_trace(mod, sch.trace, decisions={idx: [2, 32]})


@settings(max_examples=12, deadline=None)
@given(m=st.sampled_from([8, 16, 24]), n=st.sampled_from([16, 32]), k=st.sampled_from([8, 12]),
       data=st.data())
def test_random_valid_schedules_never_change_results(m, n, k, data):
    mod = matmul_module(m, n, k)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    loops = list(sch.get_loops(blk))
    extents = [m, n, k]
    new = []
    for lp, e in zip(loops, extents):
        divs = [d for d in range(1, e + 1) if e % d == 0]
        inner = data.draw(st.sampled_from(divs))
        new.append(sch.split(lp, [None, inner]))
    order = data.draw(st.permutations([x for pair in new for x in pair]))
    sch.reorder(*order)
    if data.draw(st.booleans()):
        # an outer loop over the parallel dims i or j
        first = order[0]
        if first in (new[0][0], new[0][1], new[1][0], new[1][1]):
            sch.parallel(first)
    if data.draw(st.booleans()):
        last = order[-1]
        sch.vectorize(last)
    run_matmul(sch.mod, m, n, k)


@pytest.mark.parametrize("fn, match", [
    (lambda s, l: s.split(l[1], [3, 5]), r"split: factors \[3, 5\] do not cover extent 64 of loop j"),
    (lambda s, l: s.split(l[1], [None, None]), "at most one factor may be None"),
    (lambda s, l: s.parallel(l[2]), "parallel: loop k of 'matmul' iterates a reduction dim"),
    (lambda s, l: s.unroll(l[0], 5), "unroll: factor 5 does not divide extent 64"),
    (lambda s, l: s.bind(l[2], "blockIdx.x"), "iterates a reduction dim"),
    (lambda s, l: s.bind(l[0], "warp.x"), "bind: argument .thread_axis. is .warp.x.; expected one of"),
    (lambda s, l: s.reorder(l[0]), "needs at least two loops"),
    (lambda s, l: s.fuse(l[0], l[2]), "must be adjacent"),
    (lambda s, l: s.rfactor(l[2]), "inner loop of a reduction dim split into exactly two"),
    (lambda s, l: s.cache_read(s.get_block("matmul"), 5), "is not an input"),
    (lambda s, l: s.get_block("nope"), "no block named 'nope'"),
])
def test_schedule_errors_name_the_primitive(fn, match):
    sch = mlc.Schedule(matmul_module())
    loops = sch.get_loops(sch.get_block("matmul"))
    with pytest.raises(ScheduleError, match=match):
        fn(sch, loops)


def test_split_loop_is_gone_and_vectorize_checks_inner_loops():
    sch = mlc.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    i0, i1 = sch.split(i, [None, 8])
    with pytest.raises(ScheduleError, match="no longer exists"):
        sch.split(i, [2, None])
    sch.parallel(i0)
    with pytest.raises(ScheduleError, match="inside the vectorized tile is parallel"):
        sch.vectorize(i0)


def test_trace_from_json_rejects_garbage():
    with pytest.raises(ScheduleError, match="not a trace"):
        mlc.Trace.from_json("{\"insts\": 3}")


CONV_RELU = CONV.replace("return %r : tensor<1x16x16x16xf32>", """
  %e2 = tensor.empty() : tensor<1x16x16x16xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>],
       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
       ins(%r : tensor<1x16x16x16xf32>) outs(%e2 : tensor<1x16x16x16xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%a: f32, %o: f32):
    %c0 = arith.constant 0.0 : f32
    %m = arith.maximumf %a, %c0 : f32
    linalg.yield %m : f32
  } -> tensor<1x16x16x16xf32>
  return %y : tensor<1x16x16x16xf32>""")


@pytest.mark.parametrize("case", ["cache_read_fuse_unroll", "rfactor", "reverse_compute_at",
                                  "cache_write_annotate"])
def test_conv2d_primitives(case):
    mod = mlc.Module.parse(CONV_RELU)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("conv")
    n, f, h, w, c, kh, kw = sch.get_loops(blk)
    if case == "cache_read_fuse_unroll":
        f0, f1 = sch.split(f, [2, None])
        fused = sch.fuse(n, f0)
        sch.parallel(fused)
        sch.reorder(fused, f1, h, c, kh, kw, w)
        cr = sch.cache_read(blk, 1, "local")
        sch.compute_at(cr, fused)
        sch.unroll(kw)
    elif case == "rfactor":
        c0, c1 = sch.split(c, [None, 4])
        sch.rfactor(c1)
    elif case == "reverse_compute_at":
        f0, f1 = sch.split(f, [None, 8])
        sch.reorder(n, f0, h, w, c, kh, kw, f1)
        sch.reverse_compute_at(sch.get_block("relu"), f0)
    elif case == "cache_write_annotate":
        h0, h1 = sch.split(h, [None, 4])
        sch.reorder(n, f, h0, c, kh, kw, h1, w)
        sch.cache_write(blk, 0, "local")
        sch.annotate(h0, "mlc.hint", "rows")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 18, 18)).astype(np.float32)
    wt = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x, wt), np.maximum(_conv_ref(x, wt), 0),
                               rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


def test_matmul_cache_write_and_bind_replay():
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.cache_write(blk, 0, "local")
    sch.vectorize(i1)
    assert "linalg.copy" in str(sch.mod)
    run_matmul(sch.mod)
    assert_replays(sch, mod)


def test_goto_recipe_is_plain_primitives():
    from mlc_mlir.schedule.cpu_recipes import schedule_matmul_goto

    mod = matmul_module(128, 128, 64)
    sch = mlc.Schedule(mod)
    # AVX2: each thread's 64 rows are 4 micro-panel widths, so B is packed (cache_read)
    schedule_matmul_goto(sch, sch.get_block("matmul"), threads=2, target=AVX2)
    kinds = {inst.kind for inst in sch.trace.insts}
    assert {"split", "reorder", "parallel", "cache_read", "compute_at", "unroll", "vectorize"} <= kinds
    script = str(sch.transform_script())
    assert "hoist_pad" in script and "fuse_into_containing_op" in script
    text = str(sch.mod)
    # the init (zeros written as vectors) is fused into the forall: nothing before it writes C
    assert "scf.forall" in text and "vector.transfer_write" not in text.split("scf.forall")[0]
    run_matmul(sch.mod, 128, 128, 64)
    assert_replays(sch, mod)


@pytest.mark.parametrize("m, n, k, threads", [(1, 96, 40, 1), (4, 64, 32, 2), (24, 40, 48, 1), (128, 32, 16, 2)])
def test_goto_recipe_odd_shapes(m, n, k, threads):
    """Blocking sizes shrink to divisors of odd extents; B is packed only when a thread has at
    least 4 micro-panel widths of rows (``packs_b``: 64 on AVX2), else read in place."""
    from mlc_mlir.schedule.cpu_recipes import schedule_matmul_goto

    mod = matmul_module(m, n, k)
    sch = mlc.Schedule(mod)
    schedule_matmul_goto(sch, sch.get_block("matmul"), threads=threads, nr=16, mr=4)
    packed = "cache_read" in {inst.kind for inst in sch.trace.insts}
    nr = max(d for d in range(1, 17) if n % d == 0)
    assert packed == (m // threads >= 4 * nr)
    run_matmul(sch.mod, m, n, k)
    assert_replays(sch, mod)


@pytest.mark.parametrize("m, n, k, split_n", [(16, 128, 64, True), (128, 64, 64, False)])
def test_goto_recipe_threads_split_the_bigger_operand(m, n, k, split_n):
    """N > M: the threads split N (each packs only its columns of B); else M."""
    from mlc_mlir.schedule.cpu_recipes import schedule_matmul_goto

    mod = matmul_module(m, n, k)
    sch = mlc.Schedule(mod)
    schedule_matmul_goto(sch, sch.get_block("matmul"), threads=2, nr=16, mr=4)
    trace = str(sch.trace)
    # get_loops gives l1 (i), l2 (j); the loop split 2-ways first is the parallel one
    split_j = "sch.split(l2, factors=[2, " in trace
    assert split_j == split_n and ("sch.split(l1, factors=[2, " in trace) == (not split_n)
    run_matmul(sch.mod, m, n, k)
    assert_replays(sch, mod)
    bad = mlc.Schedule(matmul_module(16, 40, 64))
    with pytest.raises(mlc.ScheduleError, match="do not divide N"):
        schedule_matmul_goto(bad, bad.get_block("matmul"), threads=2, nr=8, mr=4, split_n=True)
