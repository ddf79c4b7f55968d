"""Rule-based design spaces (``mlc_mlir.tune.space_rules``) and candidate features
(``mlc_mlir.tune.features``): samples of the schedule rules (matmul, dense + bias + relu, an
elementwise chain, softmax, batch_matmul, conv2d) compile and match numpy; the rules' default
decisions are the default schedule, for three targets; replay with other decisions gives the
other program; structural knobs; features are fixed-length and normalized."""

import dataclasses

import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError, TuningError
from mlc_mlir.pipeline.layout import layout_rewrites
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.schedule.cpu_recipes import goto_padding, register_tile_shapes
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.sampling import perfect_tilings
from mlc_mlir.schedule.trace import RV, SAMPLING_KINDS
from mlc_mlir.target import host_target
from mlc_mlir.tune.features import candidate_features, feature_names
from mlc_mlir.schedule.rules.matmul import matmul_register_tiles, register_tile_bounds
from mlc_mlir.tune.space_rules import (default_point, default_space, generate, sampled_decisions,
                                       structural_sampling)
from mlc_mlir.tune.task import extract_tasks
from test_ops_nn import conv_ref, windows
from targets import AVX2
from targets import AVX512 as AVX512_2CORES

TOL = dict(rtol=1e-4, atol=1e-4)
AVX512 = dataclasses.replace(AVX512_2CORES, cores=4)
#: The host with tiny caches: tiny shapes then use threads and several cache blocks.
SMALL = dataclasses.replace(host_target(), l1d_bytes=1 << 10, l2_bytes=8 << 10, cores=2)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


#: name -> (builder, input shapes, numpy reference)
CASES = {
    "matmul": (lambda a, b: ops.matmul(a, b), [(32, 24), (24, 48)], lambda a, b: a @ b),
    "dense_bias_relu": (lambda x, w, b: ops.relu(ops.dense(x, w, b)), [(16, 40), (48, 40), (48,)],
                        lambda x, w, b: np.maximum(x @ w.T + b, 0)),
    "dense_gemv_rows": (lambda x, w: ops.dense(x, w), [(1, 192), (37, 192)], lambda x, w: x @ w.T),
    "elementwise_chain": (lambda a, b: ops.tanh(ops.multiply(ops.add(a, b), a)), [(16, 96), (16, 96)],
                          lambda a, b: np.tanh((a + b) * a)),
    "softmax": (lambda x: ops.softmax(x), [(16, 64)], _softmax),
    "batch_matmul_relu": (lambda a, b: ops.relu(ops.batch_matmul(a, b)), [(2, 16, 12), (2, 12, 32)],
                          lambda a, b: np.maximum(a @ b, 0)),
    "batch_matmul_odd": (lambda a, b: ops.batch_matmul(a, b), [(3, 13, 7), (3, 7, 19)],
                         lambda a, b: a @ b),
    "conv2d_bias_relu": (lambda x, w, b: ops.relu(ops.conv2d(x, w, b, padding=1)),
                         [(1, 3, 8, 16), (8, 3, 3, 3), (8,)],
                         lambda x, w, b: np.maximum(conv_ref(x, w, padding=1) + b[None, :, None, None], 0)),
    "max_pool_s1": (lambda x: ops.max_pool2d(x, 3, 1, padding=1), [(1, 16, 12, 32)],
                    lambda x: np.max(windows(x, (3, 3), (1, 1), 1, (1, 1), -np.inf), axis=0)),
    # rewritten to NHWC by the layout rewrites (test_nhwc_conv_space): 17 x 17 outputs of 4
    # input channels (less than a vector: not im2col on AVX2 or AVX-512, prefers_im2col); the
    # max pool between the NHWC transposes becomes an NHWC pooling
    "conv2d_s2": (lambda x, w, b: ops.max_pool2d(ops.relu(ops.conv2d(x, w, b, strides=2, padding=1)), 3, 2,
                                                 padding=1),
                  [(1, 4, 34, 34), (32, 4, 3, 3), (32,)],
                  lambda x, w, b: np.max(windows(np.maximum(conv_ref(x, w, strides=(2, 2), padding=1)
                                                            + b[None, :, None, None], 0),
                                                 (3, 3), (2, 2), 1, (1, 1), -np.inf), axis=0)),
}


def build(name):
    fn, shapes, _ = CASES[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"a{i}", shape=s) for i, s in enumerate(shapes)]))
    return bb.finish()


def run_and_check(name, mod):
    _, shapes, ref = CASES[name]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = mlc.compile(mod)(*xs)
    np.testing.assert_allclose(np.asarray(got, np.float64), ref(*[x.astype(np.float64) for x in xs]), **TOL)


@pytest.mark.parametrize("name", list(CASES))
def test_space_samples_compile_and_match_numpy(name):
    mod = build(name)
    space = default_space(SMALL)
    keys = set()
    for seed in range(3):
        sch = generate(space, mod, seed)
        assert sch.trace.decisions, "the space samples something"
        keys.add(str(sampled_decisions(sch.trace)))
        replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json()))
        assert str(replayed.mod) == str(sch.mod)
        run_and_check(name, sch.mod)
    assert len(keys) > 1, "different seeds give different candidates"


def test_space_on_a_task_and_an_avx512_target():
    """The space of an extracted task (a unit: the dense and its epilogue, the bias add and
    the relu, as the graph function holds them), with an AVX-512 target's bounds (codegen stays
    the host's)."""
    task, = extract_tasks(build("dense_bias_relu"))
    assert task.func_name == "main"
    sch = generate(default_space(AVX512), task.module, 1)
    kinds = [i.kind for i in sch.trace.insts]
    assert kinds.count("reverse_compute_at") == 2 and "vectorize" in kinds
    run_and_check("dense_bias_relu", sch.mod)


@pytest.mark.parametrize("target", [SMALL, AVX2, AVX512], ids=["small", "avx2", "avx512"])
@pytest.mark.parametrize("name", list(CASES))
def test_default_decisions_reproduce_the_default_schedule(name, target):
    """One rule, two uses: the default schedule is the rules with their default decisions, and
    the same decisions given to the space (or to a replay of a sample's trace) rebuild it; a
    sample with other decisions is another program that still matches numpy."""
    mod = build(name)
    space = default_space(target)
    dflt = apply_default_schedule(mlc.Schedule(mod), target)
    decisions = sampled_decisions(dflt.trace)
    assert decisions, "the default schedule records the rules' decisions"
    point = default_point(space, mod)
    assert sampled_decisions(point.trace) == decisions
    assert str(generate(space, mod, 0, decisions).mod) == str(dflt.mod) == str(point.mod)
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(dflt.trace.as_json()))
    assert str(replayed.mod) == str(dflt.mod)
    # the same point by replay of a sample's trace with the default decisions (when no
    # decision of the sample is structural, its instructions are the default's)
    sample = generate(space, mod, 1).trace
    order = [i for i, inst in enumerate(sample.insts) if inst.kind in SAMPLING_KINDS]
    if structural_sampling(sample) == [] and len(order) == len(decisions):
        replayed = mlc.Schedule.from_trace(mod, sample, decisions=dict(zip(order, decisions)))
        assert str(replayed.mod) == str(dflt.mod)
    others = [generate(space, mod, seed) for seed in (1, 2, 3)]
    other = next((o for o in others if sampled_decisions(o.trace) != decisions), None)
    if other is not None:
        run_and_check(name, other.mod)


@pytest.mark.parametrize("target", [SMALL, host_target()], ids=["small", "host"])
def test_nhwc_conv_space(target):
    """The NHWC convolution's rule samples its register tile (WR x FR), input-channel block,
    threads, filter packing and window unrolling, the NHWC pooling's its channel and row tiles;
    their default decisions are the default schedule, and samples compile and match numpy
    (SMALL's 1 KiB L1d blocks the channels). The layout is NHWC on the fixed AVX2 and AVX-512
    targets too (their IR only)."""
    for tgt in (AVX2, AVX512, target):   # the last, the host's, is scheduled and run
        mod = build("conv2d_s2")
        mod = layout_rewrites(mod, tgt, mod.function_names(), CompileOptions(tgt))
        assert "linalg.conv_2d_nhwc_hwcf" in str(mod) and "linalg.pooling_nhwc_max" in str(mod), tgt.cpu
    space = default_space(target)
    dflt = apply_default_schedule(mlc.Schedule(mod), target)
    assert str(default_point(space, mod).mod) == str(dflt.mod)
    conv_decisions = set()
    for seed in range(4):
        sch = generate(space, mod, seed)
        conv = [str(sch.trace.decisions[i]) for i, inst in enumerate(sch.trace.insts)
                if inst.kind in SAMPLING_KINDS]
        conv_decisions.add(tuple(conv))
        run_and_check("conv2d_s2", sch.mod)
    assert len(conv_decisions) > 1


@pytest.mark.parametrize("target", [AVX2, host_target()], ids=["avx2", "host"])
def test_matmul_register_tile_shapes_pad_and_match_numpy(target):
    """The matmul rule's first decision is the register tile the extents are padded for:
    Goto's by default, or the full-register tiles (6 x 16 on AVX2, 14 x 32 / 9 x 48 on
    AVX-512) whose M is no multiple of the tile (edge tiles); each compiles and matches numpy,
    epilogue included (kept apart when padded)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:   # 256 KiB of operands: worth both threads
        x, w, b = f.arg("x", shape=(128, 200)), f.arg("w", shape=(96, 200)), f.arg("b", shape=(96,))
        f.output(ops.relu(ops.dense(x, w, b)))
    mod = bb.finish()
    shapes = register_tile_shapes(target, 32)
    assert ((6, 16) if target.vector_bits == 256 else (14, 32)) in shapes
    rng = np.random.default_rng(0)
    space = default_space(target)
    for idx, (mr, nr) in enumerate(shapes):
        sch = generate(space, mod, idx, [idx])
        first = sch.trace.insts[[i for i, inst in enumerate(sch.trace.insts) if inst.kind in SAMPLING_KINDS][0]]
        assert first.attrs["candidates"] == list(range(len(shapes)))
        padded = "pad_einsum" in [i.kind for i in sch.trace.insts]
        pm, pn, pk = goto_padding(target, 128, 96, 200, target.cores, 32, (mr, nr))
        # M or N off the tile: edge tiles (only K pads) unless the dense's transposed B panels
        # would be partial (then padded as goto_padding asks)
        edge = (pm > 1 or pn > 1) and 96 % nr == 0
        assert padded == (pk > 1 if edge else max(pm, pn, pk) > 1)
        x = rng.standard_normal((128, 200)).astype(np.float32)
        w = rng.standard_normal((96, 200)).astype(np.float32)
        b = rng.standard_normal(96).astype(np.float32)
        got = mlc.compile(sch.mod)(x, w, b)
        np.testing.assert_allclose(got, np.maximum(x.astype(np.float64) @ w.T + b, 0), **TOL)


@pytest.mark.parametrize("shape", [(45, 61, 70), (33, 100, 300)])
def test_matmul_register_tiles_at_odd_shapes_match_numpy(shape):
    """Every register tile shape of the host (the first decision of the matmul rule) at odd
    extents: M, N and K that no tile divides are padded, the result matches numpy, and every
    vectorized tile is a power of two wide (tile_width)."""
    m, k, n = shape
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))))
    mod = bb.finish()
    target = host_target()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for idx, _ in enumerate(register_tile_shapes(target, 32)):
        sch = generate(default_space(target), mod, idx, [idx])
        tiles = re.findall(r'linalg.matmul "matmul"  # vectorized: \w+=(\d+), \w+=(\d+)', sch.show())
        assert tiles and all(int(w) & (int(w) - 1) == 0 for _, w in tiles), sch.show()
        got = mlc.compile(sch.mod)(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL)


def test_batch_matmul_thread_axis_samples_match_numpy():
    """The batch_matmul rule samples the axis over the threads where both divide: the batches
    (default) or the rows; both compile and match numpy at odd N and K (padded), 1 and 2
    threads."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.batch_matmul(f.arg("a", shape=(4, 38, 13)), f.arg("b", shape=(4, 13, 21))))
    mod = bb.finish()
    dflt = apply_default_schedule(mlc.Schedule(mod), SMALL)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 38, 13)).astype(np.float32)
    b = rng.standard_normal((4, 13, 21)).astype(np.float32)
    axes = {}
    for seed in range(16):
        sch = generate(default_space(SMALL), mod, seed)
        blk = sch.get(sch.get_block("batch_matmul"))
        par = [blk.dims[lp.dim].name for lp in blk.loops if lp.kind == "parallel" and lp.extent > 1]
        if len(par) == 1:
            axes.setdefault(par[0], sch)
    dblk = dflt.get(dflt.get_block("batch_matmul"))
    assert [lp.dim for lp in dblk.loops if lp.kind == "parallel"] == [0]   # batches by default
    assert len(axes) == 2, f"both thread axes sampled, got {sorted(axes)}"
    for sch in axes.values():
        for threads in (1, 2):
            got = mlc.compile(sch.mod, threads=threads)(a, b)
            np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL)


def test_elementwise_thread_split_below_an_odd_dim_is_hoisted():
    """An all-parallel block whose outermost dim the threads do not divide (7 rows, as a
    Winograd output transform of a 7 x 7 tile map) splits the next dim over the threads with
    its parallel loop outermost (one fork per call, not one per row), in the default and in
    samples; the results match numpy at 1 and 2 threads."""
    shape = (7, 6, 5, 40)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.add(f.arg("a", shape=shape), f.arg("b", shape=shape))))
    mod = bb.finish()
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    schs = [apply_default_schedule(mlc.Schedule(mod), SMALL)] + \
        [generate(default_space(SMALL), mod, seed) for seed in range(3)]
    for idx, sch in enumerate(schs):
        for name in ("add", "relu"):
            if sch.get(sch.get_block(name)).reverse_compute_at is not None:
                continue   # the relu on the add's vector tiles (its epilogue)
            loops = sch.get(sch.get_block(name)).loops
            par = [i for i, lp in enumerate(loops) if lp.kind == "parallel"]
            # the default takes the threads; a sample may not (thread count 1 is no parallel loop)
            assert par == [0] and loops[0].dim == 1 if idx == 0 or par else True, \
                [(lp.dim, lp.kind, lp.extent) for lp in loops]
        for threads in (1, 2):
            got = mlc.compile(sch.mod, threads=threads)(a, b)
            np.testing.assert_allclose(got, np.maximum(a + b, 0), **TOL)


def test_replay_with_other_decisions_gives_the_other_program():
    mod = build("batch_matmul_relu")
    space = default_space(AVX2)
    sch = generate(space, mod, 3)
    trace = sch.trace
    tiles = [i for i, inst in enumerate(trace.insts) if inst.kind == "sample_perfect_tile"]
    j = tiles[1]                       # the j tiling [N/NR, NR]
    other = next(t for t in perfect_tilings(32, 2, register_tile_bounds(AVX2, 32)["nr"])
                 if t != trace.decisions[j])
    replayed = mlc.Schedule.from_trace(mod, trace, decisions={j: other})
    blk = replayed.get(replayed.get_block("batch_matmul"))
    assert [lp.extent for lp in blk.loops if lp.dim == 2] == other
    order = [i for i, inst in enumerate(trace.insts) if inst.kind in SAMPLING_KINDS]
    regenerated = generate(space, mod, 0, [other if i == j else trace.decisions[i] for i in order])
    assert str(regenerated.mod) == str(replayed.mod) != str(sch.mod)
    with pytest.raises(ScheduleError, match="perfect"):
        mlc.Schedule.from_trace(mod, trace, decisions={j: [5, 5, 5]})


def test_structural_knob_changes_the_program_through_the_space():
    """The matmul rule's yes/no knobs feed no primitive (structural_sampling finds them): pack
    B, pack A and prefetch the next C tile; running the space with a flipped decision adds or
    removes the packing of that operand (or the prefetch annotation), and every program
    matches numpy."""
    mod = build("matmul")
    space = default_space(AVX2)
    trace = generate(space, mod, 0).trace
    structural = structural_sampling(trace)
    knobs = [i for i in structural if trace.insts[i].attrs["candidates"] == [0, 1]]
    assert len(knobs) == 3, "pack B, pack A, prefetch C"
    tiles = [i for i, inst in enumerate(trace.insts) if inst.kind == "sample_categorical"
             and any(isinstance(f, RV) and f.name == inst.outputs[0].name
                     for u in trace.insts if u.kind == "split" for f in u.attrs["factors"])]
    assert len(tiles) == 5, "threads, NR, MR, MC/MR, NC/NR feed split directly"
    assert not set(tiles) & set(structural)
    order = [i for i, inst in enumerate(trace.insts) if inst.kind in SAMPLING_KINDS]

    def effect(sch):
        insts = sch.trace.insts
        return (sorted(i.inputs[1] for i in insts if i.kind == "cache_read"),
                any(i.kind == "annotate" for i in insts))
    effects = []
    for knob in knobs:
        for flag in (0, 1):
            forced = [flag if i == knob else trace.decisions[i] for i in order]
            sch = generate(space, mod, 0, forced)
            effects.append(effect(sch))
            run_and_check("matmul", sch.mod)
    base = effect(generate(space, mod, 0, [trace.decisions[i] for i in order]))
    pb, pa, pf = ([effects[2 * j], effects[2 * j + 1]] for j in range(3))
    assert [1 in e[0] for e in pb] == [False, True]
    assert [0 in e[0] for e in pa] == [False, True]
    assert [e[1] for e in pf] == [False, True]
    assert base in pb and base in pa and base in pf


def test_candidates_follow_the_target():
    a, b = register_tile_bounds(AVX2, 32), register_tile_bounds(AVX512, 32)
    assert (a["mr"], a["nr"]) == (8, 32) and (b["mr"], b["nr"]) == (16, 64)
    assert a["kc"] == (32 << 10) // 32 and b["kc"] == (48 << 10) // 64
    bb = mlc.GraphBuilder()   # 320 KiB of operands: worth the threads of both targets
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(256, 128)), f.arg("b", shape=(128, 128))))
    mod = bb.finish()
    for t in (AVX2, AVX512):
        trace = generate(default_space(t), mod, 0).trace
        tile, threads = [i.attrs["candidates"] for i in trace.insts if i.kind == "sample_categorical"][:2]
        assert tile == list(range(len(register_tile_shapes(t, 32))))
        assert threads == [d for d in range(1, t.cores + 1) if 256 % d == 0]
    # a matmul too small to pay for a fork (worth_threads) has no thread knob, as the default rule
    small = generate(default_space(AVX2), build("matmul"), 0).trace
    assert "parallel" not in [i.kind for i in small.insts]
    for t in (AVX2, AVX512):   # every register tile fits the register budget
        lanes = t.vector_lanes(32)
        for nr, mrs in matmul_register_tiles(t, 32, 1024, 1024).items():
            assert nr % lanes == 0 and 1024 % nr == 0
            assert all(1024 % mr == 0 and (mr + 1) * nr // lanes + 1 <= t.vector_registers
                       for mr in mrs)
    with pytest.raises(TuningError, match="expected a cpu or cuda Target"):
        default_space("avx2")
    with pytest.raises(TuningError, match="threads=0"):
        default_space(AVX2, threads=0)


def test_features_are_fixed_length_and_normalized():
    names = feature_names()
    assert len(set(names)) == len(names)
    rows = {}
    for name in CASES:
        mod = build(name)
        for seed in range(2):
            sch = generate(default_space(AVX2), mod, seed)
            f = candidate_features(sch, AVX2)
            assert f.shape == (len(names),) and f.dtype == np.float32
            assert np.all(np.abs(f) <= 1.0) and np.isfinite(f).all()
            rows[(name, seed)] = f
    assert not np.array_equal(rows[("matmul", 0)], rows[("matmul", 1)])
    # the register tile against the registers: the same schedule reads differently per target
    sch = generate(default_space(AVX2), build("matmul"), 0)
    assert not np.array_equal(candidate_features(sch, AVX2), candidate_features(sch, AVX512))
    with pytest.raises(TuningError, match="expected a Schedule and a Target"):
        candidate_features(sch, "avx2")


@pytest.mark.parametrize("k,n", [(777, 1001), (96, 2999)])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemv_knobs_every_value_matches_numpy(k, n, threads):
    """Each decision of the GEMV rule (threads, chunks per thread slice, rows per step), one at
    a time at each of its values, the others at their defaults, compiles and matches numpy at
    odd N and K; the default balances the thread slices (they differ by less than a vector
    tile per chunk, the last chunk of the last slice partial)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("x", (1, k)), f.arg("w", (k, n))))
    mod = bb.finish()
    space = default_space(SMALL, threads)
    dflt = default_point(space, mod)
    order = [i for i, inst in enumerate(dflt.trace.insts) if inst.kind in SAMPLING_KINDS]
    decisions = sampled_decisions(dflt.trace)
    blk = dflt.get(dflt.get_block("matmul"))
    t, chunks, tiles, v = (blk.loops[p].extent for p in (1, 2, 4, 6))
    nb = tiles * v
    assert t == threads and (t - 1) * chunks * nb < n <= t * chunks * nb < n + chunks * v
    rng = np.random.default_rng(k)
    x, w = rng.standard_normal((1, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    variants = set()
    for pos, i in enumerate(order):
        for c in range(len(dflt.trace.insts[i].attrs["candidates"])):
            forced = list(decisions)
            forced[pos] = c
            sch = generate(space, mod, 0, forced)
            key = str(sch.mod)
            if key in variants:
                continue
            variants.add(key)
            got = mlc.compile(sch.mod, threads=threads)(x, w)
            np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert len(variants) >= 4, "chunks and rows (and threads) give other programs"
