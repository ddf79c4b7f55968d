"""The tuner's reference and its default point: the reference (inputs and the unscheduled
function's outputs) is computed once per task into ``work_dir/references`` and equals numpy; a
wrong candidate is still caught against it, and a resumed run reads it instead of computing it
again; the default schedule (empty trace) and the space's default point are the first measured
candidates; ``apply_best`` keeps the default schedule when every record failed, when the
default's own record failed, or when the best record ties with the default (within 2%)."""

import dataclasses
import glob
import os
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.constants import CACHE_LINE_ALIGN
from mlc_mlir.ir.workload import canonical_names
from mlc_mlir.schedule.trace import Trace
from mlc_mlir.target import host_target
from mlc_mlir.tune import Database, RandomSearch, SearchStrategy, extract_tasks
from mlc_mlir.tune.record import TuningRecord, candidate_id
from mlc_mlir.tune.space_rules import default_point, default_space, sampled_decisions
from mlc_mlir.tune.measure import MeasureInput
from mlc_mlir.tune.worker import FAULT_KEY, Worker, compute_reference, load_reference, save_reference
import tunecheck
from tunecheck import space


def matmul(n=32):
    return tunecheck.matmul(n)


class PlantedWrong(SearchStrategy):
    """First proposes a candidate that perturbs its result, then random samples."""

    def __init__(self):
        self.planted = False
        self.random = RandomSearch()

    def propose(self, ctx, n):
        if self.planted:
            return self.random.propose(ctx, n)
        self.planted = True
        sch = mlc.Schedule(ctx.task.module, seed=1)
        space(sch, "wrong")
        return [sch.trace] + self.random.propose(ctx, n - 1)


def test_reference_once_per_task_equals_numpy_and_catches_a_wrong_candidate(tmp_path):
    db = mlc.tune(matmul(), trials=6, work_dir=str(tmp_path), space=space, strategy=PlantedWrong(),
                  batch_size=3, progress=False)
    refs = glob.glob(os.path.join(tmp_path, "references", "*.npz"))
    assert len(refs) == 1
    (a, b), (expected,) = load_reference(refs[0])
    np.testing.assert_allclose(expected, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    wrong = [r for r in db.records() if f'"{FAULT_KEY}"' in r.trace]
    assert len(wrong) == 1 and wrong[0].error.startswith("wrong result: output 0 differs")
    assert sum(r.ok for r in db.records()) == 5

    # a resumed run reads the stored reference: a corrupted one fails every new candidate
    with np.load(refs[0]) as z:
        arrays = dict(z)
    arrays["out0"] = arrays["out0"] + 1.0
    np.savez(refs[0], **arrays)
    time.sleep(0.01)
    stamp = os.stat(refs[0]).st_mtime_ns
    db = mlc.tune(matmul(), trials=8, work_dir=str(tmp_path), space=space, strategy=RandomSearch(),
                  batch_size=2, progress=False)
    new = db.records()[6:]
    assert len(new) == 2 and all(r.error.startswith("wrong result") for r in new)
    assert os.stat(refs[0]).st_mtime_ns == stamp


def test_default_and_default_point_are_measured_first(tmp_path):
    mod = matmul(64)
    task, = extract_tasks(mod)
    point = default_point(default_space(host_target()), task.module)
    assert point is not None
    db = mlc.tune(mod, trials=4, work_dir=str(tmp_path), strategy=RandomSearch(), batch_size=4,
                  progress=False)
    first = db.records()[:4]
    assert any(not Trace.from_json(r.trace).insts for r in first)
    decisions = [sampled_decisions(Trace.from_json(r.trace)) for r in first]
    assert sampled_decisions(point.trace) in decisions


def _record(task, trace_json, latencies, error=None):
    tkey = host_target().key()
    return TuningRecord(task.workload, tkey, trace_json, Trace.from_json(trace_json).decisions,
                        tuple(latencies), error, 0.0, candidate_id(task.workload, tkey, trace_json),
                        task.name, canonical_names(task.module, task.func_name), task.flops)


def test_apply_best_keeps_the_default_when_records_or_the_default_failed(tmp_path):
    mod = matmul(64)
    task, = extract_tasks(mod)
    other = mlc.Schedule(task.module, seed=3)
    space(other)
    default = mlc.tune.apply_best(mod, Database(os.path.join(tmp_path, "empty.jsonl")), host_target())
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 64, 64)).astype(np.float32)

    def applied(records):
        db = Database(os.path.join(tmp_path, f"db{len(os.listdir(tmp_path))}.jsonl"))
        for r in records:
            db.commit(r)
        out = mlc.tune.apply_best(mod, db, host_target())
        np.testing.assert_allclose(mlc.compile(mod, database=db)["main"](a, b), a @ b,
                                   rtol=1e-4, atol=1e-4)
        return str(out) != str(default)

    empty = Trace().as_json()
    assert not applied([_record(task, other.trace.as_json(), (), "timeout: ...")])
    assert not applied([_record(task, empty, (), "timeout: ..."),
                        _record(task, other.trace.as_json(), (1.0,))])
    assert applied([_record(task, empty, (2.0,)), _record(task, other.trace.as_json(), (1.0,))])
    assert not applied([_record(task, empty, (1.0,)), _record(task, other.trace.as_json(), (2.0,))])
    assert not applied([_record(task, empty, (1.0,)), _record(task, other.trace.as_json(), (0.99,))])


def test_every_candidate_reads_its_inputs_from_a_cache_line(tmp_path):
    """A worker's inputs start on a cache line whether it computed the reference (numpy's
    arrays: 16 bytes past one) or loaded it from ``references/`` (``np.load``: 32 bytes past
    one), so a candidate's time does not depend on the worker that measured it; the inputs keep
    their values (the stored reference's)."""
    task = extract_tasks(matmul(200))[0]
    inp = MeasureInput(task.func_name, str(task.module), Trace().as_json(), host_target(), repeat=1)
    computed = Worker()
    assert computed.build(inp)["error"] is None
    path = str(tmp_path / "ref.npz")
    args, expected = compute_reference(inp)
    save_reference(path, args, expected)
    loaded_args, _ = load_reference(path)
    assert any(a.ctypes.data % CACHE_LINE_ALIGN for a in args + loaded_args)   # what numpy gives
    loaded = Worker()
    assert loaded.build(dataclasses.replace(inp, reference=path))["error"] is None
    for w, want in ((computed, args), (loaded, loaded_args)):
        got = w._built[0]["args"]
        assert all(a.ctypes.data % CACHE_LINE_ALIGN == 0 for a in got)
        for g, x in zip(got, want):
            np.testing.assert_array_equal(g, x)
        assert w.run()["error"] is None


def test_the_reference_of_a_model_with_input_ids_indexes_its_table():
    """A model whose int64 input ids index an embedding table refuses the signed integers a
    reference tries first (``take`` checks ``0 <= id < rows``): its reference (and so the
    whole-model check of ``mlc.tune``) takes ids in ``[0, 2)`` and equals numpy's lookup."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        ids = f.arg("ids", shape=(12,), dtype="int64")   # torch.nn.Embedding's lookup: no wrap-around
        f.output(ops.matmul(ops.take(table, ids, axis=0, negative_indices=False), w))
    mod = bb.finish()
    inp = MeasureInput("main", str(mod), Trace().as_json(), host_target(), repeat=1)
    (got_ids,), (expected,) = compute_reference(inp)
    assert got_ids.dtype == np.int64 and got_ids.min() >= 0 and got_ids.max() <= 1
    np.testing.assert_allclose(expected, table[got_ids] @ w, rtol=1e-5, atol=1e-5)
    # integer inputs a function accepts stay signed (sign handling is checked)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("x", shape=(64,), dtype="int32"), f.arg("y", shape=(64,), dtype="int32")))
    (x, y), _ = compute_reference(MeasureInput("main", str(bb.finish()), Trace().as_json(), host_target(), repeat=1))
    assert min(x.min(), y.min()) < 0
