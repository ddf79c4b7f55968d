"""The whole-model check at the end of ``mlc.tune``: a database whose record makes the model
slower must not make ``mlc.compile(mod, database=db)`` slower than the default compile; the
record is rejected (``Database.reject``) and the model compiles with its default schedules."""

import json
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.workload import canonical_names
from mlc_mlir.target import host_target
from mlc_mlir.tune import Database, Executor, MeasureResult, TuningRecord, extract_tasks
from mlc_mlir.tune.model_check import MODEL_ROUNDS
from mlc_mlir.tune.record import candidate_id
from mlc_mlir.tune.report import summary_rows
import tunecheck


def _record(task, trace_json, ms):
    """A search record of ``task`` claiming ``ms`` (the injected lie of a noisy measurement)."""
    tkey = host_target().key()
    return TuningRecord(task.workload, tkey, trace_json, mlc.Trace.from_json(trace_json).decisions,
                        (ms,), None, time.time(), candidate_id(task.workload, tkey, trace_json),
                        task.name, canonical_names(task.module, task.func_name), task.flops)


def test_a_record_that_makes_the_model_slower_is_rejected_and_compile_falls_back(tmp_path):
    """A scalar schedule of a 256 matmul (two splits, no vectorization, no register tile: many
    times slower than the default on any CPU) recorded as 100x faster than the default, as a
    disturbed measurement might: ``mlc.tune`` (real workers, nothing left to search, no
    re-measurement) runs the model check, which times the model for real and rejects it."""
    mod = tunecheck.matmul(256)
    task, = extract_tasks(mod)
    sch = mlc.Schedule(task.module, seed=3)
    tunecheck.space(sch)
    bad = sch.trace.as_json()
    db = Database(tmp_path / "database.jsonl")
    db.commit(_record(task, mlc.Trace().as_json(), 1.0))
    db.commit(_record(task, bad, 0.01))
    assert db.best(task.workload).trace == bad           # the lie would replace the default
    db = mlc.tune(mod, trials=2, work_dir=str(tmp_path), space=tunecheck.space, finalists=0,
                  progress=False)
    rejected = db.rejected(task.workload)
    assert rejected is not None and rejected.trace == bad
    assert rejected.error.startswith("rejected: the whole model was not faster with it")
    assert db.best(task.workload).is_default
    row, = summary_rows([task], db, host_target().key())
    assert row["note"] == "rejected by the model check" and row["speedup"] == 1.0
    default_ir = str(mlc.tune.apply_best(mod, Database(tmp_path / "empty.jsonl")))
    assert str(mlc.tune.apply_best(mod, db)) == default_ir
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 256, 256)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(a, b), a.astype(np.float64) @ b,
                               rtol=1e-4, atol=1e-3)


def two_matmuls():
    """``main(a, b, c) = (a @ b) @ c`` with two distinct matmul workloads."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        ab = ops.matmul(f.arg("a", (16, 32)), f.arg("b", (32, 24)))
        f.output(ops.matmul(ab, f.arg("c", (24, 40))))
    return bb.finish()


class ModelTimes(Executor):
    """Injected times of the whole model (the tasks are not measured again): 10 ms, minus
    ``gain[task name]`` for each task whose record it is compiled with (a negative gain: the
    record slows the model down); the measurements numbered in ``slow`` take three times as
    long (a slow phase of the machine)."""

    max_workers = 2
    shares_files = False

    def __init__(self, model, gain, slow=()):
        self.model, self.gain, self.slow = str(model), gain, set(slow)
        self.models = []

    def measure(self, inputs, timeout_s):
        for i, inp in enumerate(inputs):
            assert inp.module == self.model
            names = {json.loads(r)["task_name"] for r in inp.records}
            ms = (10.0 - sum(self.gain[n] for n in names)) * (3 if len(self.models) in self.slow else 1)
            self.models.append(names)
            yield i, MeasureResult((ms,) * inp.repeat)


def _tuned_two_matmuls(tmp_path, gain, slow=()):
    """``mlc.tune`` of :func:`two_matmuls` over a database where each task has a candidate that
    beat its default (0.3 and 0.6 ms against 1 ms: the first task claims the larger saving),
    with nothing left to search and no re-measurement: only the model check runs."""
    mod = two_matmuls()
    t1, t2 = extract_tasks(mod)
    db = Database(tmp_path / "database.jsonl")
    for t, ms in ((t1, 0.3), (t2, 0.6)):
        sch = mlc.Schedule(t.module, seed=1)
        block, = [n for n in canonical_names(t.module, t.func_name) if not n.endswith(".init")]
        i, j, _ = sch.get_loops(sch.get_block(block))
        sch.split(i, sch.sample_perfect_tile(i, 2, 16))
        db.commit(_record(t, mlc.Trace().as_json(), 1.0))
        db.commit(_record(t, sch.trace.as_json(), ms))
    fake = ModelTimes(mod, {t1.name: gain[0], t2.name: gain[1]}, slow)
    db = mlc.tune(mod, trials=4, work_dir=str(tmp_path), space=tunecheck.space, finalists=0,
                  executor=fake, progress=False)
    return mod, t1, t2, db, fake


def test_the_model_check_keeps_the_records_that_pay_and_rejects_the_rest(tmp_path):
    """Both tasks win alone; in the model one record gains 2 ms and the other costs 5 ms: the
    full set loses, the half with the larger claimed saving wins: kept, the other rejected."""
    mod, t1, t2, db, fake = _tuned_two_matmuls(tmp_path, (2.0, -5.0))
    both = {t1.name, t2.name}
    # default and all records, 5 rotated rounds; then default and the first half, 5 rounds
    assert fake.models == rounds(set(), both) + rounds(set(), {t1.name})
    assert not db.best(t1.workload).is_default and db.rejected(t1.workload) is None
    assert db.best(t2.workload).is_default and db.rejected(t2.workload) is not None
    _check_outputs(mod, db)


def test_a_model_that_gains_keeps_every_record(tmp_path):
    mod, t1, t2, db, fake = _tuned_two_matmuls(tmp_path, (2.0, 1.0))
    both = {t1.name, t2.name}
    assert fake.models == rounds(set(), both)
    assert not db.best(t1.workload).is_default and not db.best(t2.workload).is_default
    assert db.rejected(t1.workload) is None and db.rejected(t2.workload) is None
    _check_outputs(mod, db)


def test_a_slow_phase_in_one_round_does_not_decide(tmp_path):
    """The records gain 5 % together; the tuned model's run of the third round (measurement
    5) hits a slow phase: it loses that round and wins the four others, so the median of the
    paired rounds keeps both records, without a halving."""
    mod, t1, t2, db, fake = _tuned_two_matmuls(tmp_path, (0.25, 0.25), slow={5})
    assert fake.models == rounds(set(), {t1.name, t2.name})
    assert not db.best(t1.workload).is_default and not db.best(t2.workload).is_default
    _check_outputs(mod, db)


def test_a_slow_phase_in_most_rounds_rejects_the_full_set(tmp_path):
    """The same gain, but the tuned model's runs of the first three rounds (measurements 1, 2
    and 5) hit a slow phase: it loses most rounds and the full set is not accepted; the halving
    then measures the first record alone (2.5 % faster in every round): kept, the other
    rejected."""
    mod, t1, t2, db, fake = _tuned_two_matmuls(tmp_path, (0.25, 0.25), slow={1, 2, 5})
    assert fake.models == rounds(set(), {t1.name, t2.name}) + rounds(set(), {t1.name})
    assert not db.best(t1.workload).is_default and db.rejected(t1.workload) is None
    assert db.best(t2.workload).is_default and db.rejected(t2.workload) is not None
    _check_outputs(mod, db)


def test_a_model_that_gains_nothing_keeps_the_default(tmp_path):
    """A gain within the tie tolerance (1 %) keeps the default for both tasks."""
    mod, t1, t2, db, fake = _tuned_two_matmuls(tmp_path, (0.05, 0.05))
    assert db.best(t1.workload).is_default and db.best(t2.workload).is_default
    assert db.rejected(t1.workload) is not None and db.rejected(t2.workload) is not None
    _check_outputs(mod, db)


def rounds(default, tuned):
    """The models measured by one comparison of the default and a tuned build: ``MODEL_ROUNDS``
    rounds, each starting one input further (:meth:`Executor.compare`)."""
    return [m for r in range(MODEL_ROUNDS) for m in ((default, tuned) if r % 2 == 0 else (tuned, default))]


def _check_outputs(mod, db):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((32, 24)).astype(np.float32)
    c = rng.standard_normal((24, 40)).astype(np.float32)
    want = (a.astype(np.float64) @ b) @ c
    np.testing.assert_allclose(mlc.compile(mod, database=db)(a, b, c), want, rtol=1e-4, atol=1e-4)
