"""Tuned and default compiles schedule the same units in the same module: with an empty database
(or records of another target) ``compile(mod, database=db)`` gives the default compile's IR stage
for stage; a candidate that wins the search but not the interleaved re-measurement (an injected
executor decides the timings) never replaces the default, one that wins it does, and the
result equals numpy; the table's speedup is over the default."""

import hashlib
import json
import re
import warnings

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.workload import canonical_names
from mlc_mlir.target import Target, host_target
from mlc_mlir.tune import Database, Executor, MeasureResult, extract_tasks
from mlc_mlir.tune.record import TuningRecord, candidate_id
from mlc_mlir.tune.report import summary_rows
from mlc_mlir.tune.space_rules import default_point, default_space
from mlc_mlir.tune.tuner import REMEASURE_REPEATS
import tunecheck


def convnet(rng):
    """Two 3x3 convolutions with a residual add and relus, then a dense layer (NCHW input);
    returns the module and a float64 numpy function of it."""
    w1, w2 = (rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1 for _ in range(2))
    wd = rng.standard_normal((10, 16 * 12 * 12)).astype(np.float32) * 0.01
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (1, 16, 12, 12))
        y = ops.relu(ops.conv2d(x, f.param("w1", w1), strides=1, padding=1))
        y = ops.relu(ops.add(ops.conv2d(y, f.param("w2", w2), strides=1, padding=1), x))
        f.output(ops.dense(ops.reshape(y, (1, 16 * 12 * 12)), wd))

    def conv(x, w):
        win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                       (3, 3), axis=(2, 3))
        return np.einsum("nchwij,fcij->nfhw", win, w.astype(np.float64))

    def ref(x):
        y = np.maximum(conv(x.astype(np.float64), w1), 0)
        y = np.maximum(conv(y, w2) + x, 0)
        return y.reshape(1, -1) @ wd.T.astype(np.float64)

    return bb.finish().bind_params(), ref


def _stages(mod, tmp_path, name, **kwargs):
    """The IR of each stage, up to the names of folded constants (uniqued per compile) and the
    constants' bytes (equal, by the names they are compared with)."""
    folder = tmp_path / name
    mlc.compile(mod, dump_ir=str(folder), **kwargs)
    return {p.name: re.sub(r"dense_resource<[^>]*>", "dense_resource<...>", p.read_text().split("{-#")[0])
            for p in folder.iterdir()}


def test_empty_database_compiles_the_default_module(tmp_path, rng):
    mod, _ = convnet(rng)
    default = _stages(mod, tmp_path, "default")
    empty = _stages(mod, tmp_path, "empty", database=Database(tmp_path / "empty.jsonl"))
    assert default.keys() == empty.keys()
    for name in ("03-schedule.mlir", "06-prepare.mlir", "07-lower.mlir"):
        assert default[name] == empty[name], name
    assert "mlc.task" in default["02-tasks.mlir"] and "func.call" not in default["03-schedule.mlir"]
    # records of another target change nothing either
    task = extract_tasks(mod)[0]
    other = Database(tmp_path / "other.jsonl")
    sch = mlc.Schedule(task.module)
    blk = sch.get_block(next(iter(sch.model.ops))[1], func_name=task.func_name)
    sch.get_loops(blk)
    key = Target("cpu", cpu="x86-64").key()
    other.commit(TuningRecord(task.workload, key, sch.trace.as_json(), {}, (0.001,), None, 0.0,
                              candidate_id(task.workload, key, sch.trace.as_json()), task.name,
                              canonical_names(task.module, task.func_name), task.flops))
    assert _stages(mod, tmp_path, "other", database=other)["07-lower.mlir"] == default["07-lower.mlir"]


class FakeTimes(Executor):
    """Measures nothing: every candidate without instructions (the default) takes 1 ms; the
    others ``search_ms`` during the search and ``final_ms`` in the re-measurement (recognised by
    its full repeats), and the whole model compiled with records (the model check)
    ``final_ms``; with ``spread``, times a fixed pseudo-random factor of 1 to 1.1 of those, per
    trace."""

    max_workers = 2
    shares_files = False

    def __init__(self, search_ms, final_ms, spread=False):
        self.search_ms, self.final_ms, self.spread = search_ms, final_ms, spread
        self.final_calls = 0

    def _factor(self, trace):
        return 1 + int(hashlib.sha256(trace.encode()).hexdigest()[:4], 16) % 100 / 1000 if self.spread else 1

    def measure(self, inputs, timeout_s):
        for i, inp in enumerate(inputs):
            final = inp.repeat == REMEASURE_REPEATS
            self.final_calls += final
            default = not mlc.Trace.from_json(inp.trace).insts and not inp.records
            if inp.records:   # the whole-model check: the model with the records gets the final time
                ms = self.final_ms
            else:
                ms = 1.0 if default else (self.final_ms if final else self.search_ms) * self._factor(inp.trace)
            yield i, MeasureResult((ms,) * inp.repeat)


@pytest.mark.parametrize("final_ms, replaced", [(1.0, False), (0.995, False), (1.2, False), (0.5, True)])
def test_a_candidate_replaces_the_default_only_if_it_wins_the_remeasurement(tmp_path, final_ms, replaced):
    mod = tunecheck.matmul(32)
    fake = FakeTimes(search_ms=0.5, final_ms=final_ms)
    db = mlc.tune(mod, trials=6, work_dir=str(tmp_path / "t"), space=tunecheck.space, executor=fake,
                  progress=False)
    assert fake.final_calls > 0
    task, = extract_tasks(mod)
    best = db.best()
    assert best.is_default != replaced and best.final
    row, = summary_rows([task], db, host_target().key())
    assert row["speedup"] == pytest.approx(1.0 / final_ms if replaced else 1.0)
    default_ir = str(mlc.tune.apply_best(mod, Database(tmp_path / "empty.jsonl")))
    assert (str(mlc.tune.apply_best(mod, db)) != default_ir) == replaced
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(a, b), a @ b, rtol=1e-4, atol=1e-4)


class DefaultPointFaster(Executor):
    """Measures nothing: the default schedule's own decisions as a trace (``point``) take
    0.5 ms, and so does the whole model compiled with records (the model check); the empty
    trace (the default) 1 ms, any other trace 2 ms: the timing of a host whose speed changed
    between the default's runs and its twin's."""

    max_workers = 2
    shares_files = False

    def __init__(self, point):
        self.point, self.seen = point, set()

    def measure(self, inputs, timeout_s):
        for i, inp in enumerate(inputs):
            self.seen.add(inp.trace)
            empty = not mlc.Trace.from_json(inp.trace).insts
            ms = 0.5 if inp.records or inp.trace == self.point else 1.0 if empty else 2.0
            yield i, MeasureResult((ms,) * inp.repeat)


def test_the_default_point_never_replaces_the_default(tmp_path):
    """The rules' default decisions as a trace compile to the default's code: measured faster
    than the default, it is no finalist and the default stays (speedup 1.00x in the table)."""
    mod = tunecheck.matmul(64)
    task, = extract_tasks(mod)
    point = default_point(default_space(host_target()), task.module).trace.as_json()
    fake = DefaultPointFaster(point)
    db = mlc.tune(mod, trials=6, work_dir=str(tmp_path / "t"), executor=fake, progress=False)
    assert point in fake.seen   # measured, and fastest of all
    assert db.best().is_default
    row, = summary_rows([task], db, host_target().key())
    assert row["speedup"] == pytest.approx(1.0)


def test_tuned_convnet_equals_numpy(tmp_path, rng):
    """A real (tiny) tune of a model with convolutions and a residual, compiled with its
    database: the tuned schedules apply in the graph and the result equals numpy (float64)."""
    mod, ref = convnet(rng)
    db = mlc.tune(mod, trials=8, work_dir=str(tmp_path / "t"), progress=False)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(x), ref(x), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(mlc.compile(mod)(x), ref(x), rtol=1e-3, atol=1e-3)


class BrokenRecords:
    """A database (the compiler's protocol) whose every unit has a record that cannot replay."""

    def query_best_trace(self, workload, target_key, names=None, func_name=None):
        return json.dumps({"format": "mlc-trace-v1", "decisions": {}, "insts": [
            {"kind": "get_block", "inputs": ["no_such_block"], "attrs": {"func_name": func_name},
             "outputs": ["b0"]}]})


def test_a_record_that_does_not_replay_leaves_the_default(tmp_path, rng):
    mod, ref = convnet(rng)
    with pytest.warns(UserWarning, match="does not replay"):
        got = _stages(mod, tmp_path, "broken", database=BrokenRecords())
    assert got["07-lower.mlir"] == _stages(mod, tmp_path, "default")["07-lower.mlir"]


def test_tuned_schedules_keep_the_in_place_writes(tmp_path, rng):
    """Every unit replaced by a record of the default space (injected timings make each one
    win): the scheduled module differs from the default's, and the writes across units in
    place (Winograd outputs and residuals into padded buffers) are kept: no more
    ``memrefCopy`` calls than the default compile makes; the result equals numpy."""
    mod, ref = convnet(rng)
    tasks = extract_tasks(mod)
    db = mlc.tune(mod, trials=5 * len(tasks), work_dir=str(tmp_path / "t"),
                  executor=FakeTimes(search_ms=0.5, final_ms=0.5, spread=True), progress=False)
    assert sum(not db.best(t.workload).is_default for t in tasks) >= 2
    default = _stages(mod, tmp_path, "default")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # every record replays in the graph
        tuned = _stages(mod, tmp_path, "tuned", database=db)
    assert tuned["03-schedule.mlir"] != default["03-schedule.mlir"]
    assert tuned["09-llvm.ll"].count("memrefCopy") <= default["09-llvm.ll"].count("memrefCopy")
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(x), ref(x), rtol=1e-3, atol=1e-3)
