"""End to end: tune a small matmul and an MLP (few trials), apply the best schedules, compile,
compare with numpy; a record of one function applies to another function of the same workload;
the best trace exported as a transform script gives ``sch.mod`` in upstream mlir-opt; the
summary and the tuning curve are written; the Ray executor (skipped without ray)."""


import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ir
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.scheduling import unscheduled_functions
from mlc_mlir.pipeline.tasks import task_units
from mlc_mlir.schedule.loop_nest import analyze_module
from mlc_mlir.target import host_target
from mlc_mlir.tune import Database, extract_tasks
from mlc_mlir.tune.report import summary_rows
from mlir_opt_replay import applied_in_mlir_opt


def matmul(n=32):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", (n, n)), f.arg("b", (n, n))))
    return bb.finish()


def tile_matmuls(sch):
    """A space for any task: tile i and j of every matmul, reorder to (i0, j0, k, i1, j1)."""
    for (_, name), info in analyze_module(sch.payload).items():
        if info.op_name == "linalg.matmul":
            i, j, k = sch.get_loops(sch.get_block(name))
            i0, i1 = sch.split(i, sch.sample_perfect_tile(i, 2, 8))
            j0, j1 = sch.split(j, sch.sample_perfect_tile(j, 2, 16))
            sch.reorder(i0, j0, k, i1, j1)


def mlp(rng, hidden=16):
    """x(4, 16) -> dense 16 + relu -> dense 16 + relu (same workload as the first) -> dense 8."""
    ws = [rng.standard_normal(s).astype(np.float32) for s in [(hidden, 16), (hidden, hidden), (8, hidden)]]
    bs = [rng.standard_normal(hidden).astype(np.float32) for _ in range(2)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        h = f.arg("x", (4, 16))
        h = ops.relu(ops.dense(h, ws[0], bs[0]))
        h = ops.relu(ops.dense(h, ws[1], bs[1]))
        f.output(ops.dense(h, ws[2]))

    def ref(x):
        y = np.maximum(x @ ws[0].T + bs[0], 0)
        y = np.maximum(y @ ws[1].T + bs[1], 0)
        return y @ ws[2].T
    return bb.finish(), ref


def test_tune_matmul_apply_best_compile_numerics(tmp_path):
    mod = matmul()
    db = mlc.tune(mod, trials=8, work_dir=str(tmp_path), space=tile_matmuls, progress=True)
    assert isinstance(db, Database) and len([r for r in db.records() if not r.final]) == 8
    assert (tmp_path / "database.jsonl").exists() and (tmp_path / "tuning_curve.png").exists()
    task, = extract_tasks(mod)
    best = db.best(task.workload, host_target().key())
    assert best is not None and best.error is None
    row, = summary_rows([task], db, host_target().key())
    assert row["trials"] == 8 and row["best_ms"] == best.latency_ms and row["speedup"] >= 1.0
    assert db.best() == best and db.best(task.name) == best and db.best(task) == best
    tuned = mlc.tune.apply_best(mod, db, "cpu")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(mlc.compile(tuned)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    if mlc.Trace.from_json(best.trace).insts:  # the best is a schedule, not the baseline
        assert "scf.for" in str(tuned)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # the database is the protocol the compiler calls
    assert db.query_best_trace(task.workload, host_target().key()) == best.trace


def test_tune_mlp_shares_workloads_and_applies_to_every_function(tmp_path, rng):
    mod, ref = mlp(rng)
    tasks = extract_tasks(mod)
    assert sorted(t.weight for t in tasks) == [1, 2]      # the two hidden layers are one workload
    assert sum(t.flops for t in tasks) > 0
    db = mlc.tune(mod, trials=8, work_dir=str(tmp_path), space=tile_matmuls, progress=False)
    assert {r.workload for r in db.records()} == {t.workload for t in tasks}
    tuned = mlc.tune.apply_best(mod, db, host_target())
    shared = next(t for t in tasks if t.weight == 2)
    # a scheduled record of the first layer alone in a database: applied to both layers, which
    # the tasks stage made one function called twice, as the tuner's task is (schedule="none":
    # nothing else is scheduled)
    rec = next(r for r in db.records(shared.workload, host_target().key())
               if r.ok and mlc.Trace.from_json(r.trace).insts and not r.final)
    assert rec.task_name == shared.name
    only = Database(tmp_path / "only.jsonl")
    only.commit(rec)
    one = run_stages(mod, CompileOptions(host_target(), schedule="none", database=only), until="schedule")[1]
    tasked = run_stages(mod, CompileOptions(host_target()), until="tasks")[1]
    units = task_units(tasked, unscheduled_functions(tasked))
    unit, = [u for u in units if u.workload == shared.workload]
    with tasked.context:
        callees = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                   for op in find_ops(tasked, "func.call")]
    assert callees.count(unit.func) == 2 and len(units) == 2
    # the record scheduled the shared function; the other unit stays plain linalg in main
    assert unscheduled_functions(one) == ["main"] and unit.func in one.function_names()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(one)(x), ref(x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mlc.compile(mod, database=only)(x), ref(x), rtol=1e-4, atol=1e-4)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(tuned)(x), ref(x), rtol=1e-4, atol=1e-4)
    # records of another target never apply: the default compile's schedule
    other = mlc.tune.apply_best(mod, db, mlc.target.Target("cpu", cpu="x86-64"))
    empty = mlc.tune.apply_best(mod, Database(tmp_path / "empty.jsonl"), mlc.target.Target("cpu", cpu="x86-64"))
    assert str(other) == str(empty)


def test_best_trace_replays_in_mlir_opt(tmp_path):
    mod = matmul(16)
    db = mlc.tune(mod, trials=5, work_dir=str(tmp_path), space=tile_matmuls, progress=False)
    task, = extract_tasks(mod)
    scheduled = [r for r in db.records() if r.ok and mlc.Trace.from_json(r.trace).insts]
    rec = min(scheduled, key=lambda r: r.latency_ms)
    sch = mlc.Schedule.from_trace(task.module, mlc.Trace.from_json(rec.trace))
    assert applied_in_mlir_opt(task.module, sch, tmp_path) == str(sch.mod).strip()


def test_ray_executor_local_cluster(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ex = mlc.tune.RayExecutor()
        assert ex.max_workers == 2
        db = mlc.tune(matmul(16), trials=4, work_dir=str(tmp_path), space=tile_matmuls,
                      executor=ex, progress=False, finalists=0, check_model=False)
        assert len(db) == 4 and all(r.error is None for r in db.records())
    finally:
        ray.shutdown()
