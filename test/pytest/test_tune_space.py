"""Rule-based design spaces (``mlc_mlir.tune.space_rules``) and candidate features
(``mlc_mlir.tune.features``): samples of the space (matmul, dense + bias + relu, an elementwise
chain, softmax, batch_matmul, conv2d) compile and match numpy; the default schedule is a point
of the space for three targets; replay with other decisions gives the other program; structural
knobs; features are fixed-length and normalized."""

import dataclasses

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError, TuningError
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.sampling import perfect_tilings
from mlc_mlir.schedule.trace import RV, SAMPLING_KINDS
from mlc_mlir.target import host_target
from mlc_mlir.tune.features import candidate_features, feature_names
from mlc_mlir.tune.contraction_space import matmul_register_tiles, register_tile_bounds
from mlc_mlir.tune.space_rules import (default_point, default_space, generate, sampled_decisions,
                                       structural_sampling)
from mlc_mlir.tune.task import extract_tasks
from test_ops_nn import conv_ref
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


def default_decisions(mod, target, space):
    """The default schedule of ``mod`` for ``target`` (the default rules, independently of the
    space) and the decisions of the space's default point."""
    dflt = mlc.Schedule(mod)
    apply_default_schedule(dflt, target)
    point = default_point(space, mod)
    assert point is not None
    return dflt, sampled_decisions(point.trace)


@pytest.mark.parametrize("target", [SMALL, AVX2, AVX512], ids=["small", "avx2", "avx512"])
@pytest.mark.parametrize("name", list(CASES))
def test_default_schedule_is_a_point_of_the_space(name, target):
    mod = build(name)
    space = default_space(target)
    dflt, forced = default_decisions(mod, target, space)
    sch = generate(space, mod, 0, forced)
    assert str(sch.mod) == str(dflt.mod) == str(default_point(space, mod).mod)
    # the same point by replay: a sample's trace with the point's decisions (all but the
    # structural ones feed primitives; those are taken from the point's own trace)
    sample = generate(space, mod, 1).trace
    order = [i for i, inst in enumerate(sch.trace.insts) if inst.kind in SAMPLING_KINDS]
    if structural_sampling(sample) == [] and len(order) == len(sample.decisions):
        replayed = mlc.Schedule.from_trace(mod, sample, decisions=dict(zip(order, forced)))
        assert str(replayed.mod) == str(dflt.mod)


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
    """The pack knob feeds no primitive (structural_sampling finds it); running the space with
    the flipped decision adds or removes the packing of B."""
    mod = build("matmul")
    space = default_space(AVX2)
    trace = generate(space, mod, 0).trace
    structural = structural_sampling(trace)
    pack = [i for i in structural if trace.insts[i].attrs["candidates"] == [0, 1]]
    assert len(pack) == 1
    tiles = [i for i, inst in enumerate(trace.insts) if inst.kind == "sample_categorical"
             and any(isinstance(f, RV) and f.name == inst.outputs[0].name
                     for u in trace.insts if u.kind == "split" for f in u.attrs["factors"])]
    assert len(tiles) == 5, "threads, NR, MR, MC/MR, NC/NR feed split directly"
    assert not set(tiles) & set(structural)
    order = [i for i, inst in enumerate(trace.insts) if inst.kind in SAMPLING_KINDS]
    packs = []
    for flag in (0, 1):
        forced = [flag if i == pack[0] else trace.decisions[i] for i in order]
        sch = generate(space, mod, 0, forced)
        packs.append("cache_read" in [i.kind for i in sch.trace.insts])
        run_and_check("matmul", sch.mod)
    assert packs == [False, True]


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
        threads = [i.attrs["candidates"] for i in trace.insts if i.kind == "sample_categorical"][0]
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
    with pytest.raises(TuningError, match="expected a cpu Target"):
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
