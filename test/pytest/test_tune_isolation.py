"""Failing candidates are results, never tuner crashes: planted candidates whose worker
segfaults, aborts, hangs past the timeout or returns wrong numbers are each recorded with their
error, the workers are restarted, and tuning goes on to the budget with good candidates."""

import contextlib
import os
import threading

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.target import host_target
from mlc_mlir.tune import LocalExecutor, MeasureInput, RandomSearch, SearchStrategy, extract_tasks
import tunecheck
from tunecheck import space

FAULTS = ["segv", "abort", "hang", "wrong"]


def matmul(n=16):
    return tunecheck.matmul(n)


class PlantedFaults(SearchStrategy):
    """First proposes one candidate per fault, then random samples."""

    def __init__(self):
        self.planted = False
        self.random = RandomSearch()
        self.notified = []

    def propose(self, ctx, n):
        if self.planted:
            return self.random.propose(ctx, n)
        self.planted = True
        out = []
        for fault in FAULTS:
            sch = mlc.Schedule(ctx.task.module, seed=1)
            space(sch, fault)
            out.append(sch.trace)
        return out

    def notify(self, ctx, records):
        self.notified.append(len(records))


def test_planted_crash_hang_and_wrong_are_recorded_and_tuning_goes_on(tmp_path):
    strategy = PlantedFaults()
    db = mlc.tune(matmul(), trials=12, work_dir=str(tmp_path), space=space, strategy=strategy,
                  timeout_s=3.0, batch_size=5, progress=False)
    recs = [r for r in db.records() if not r.final]   # the trials (finalists' re-measurements aside)
    assert len(recs) == 12
    errors = {r.trace: r.error for r in recs if r.error}
    by_fault = {f: next(e for t, e in errors.items() if f'"{f}"' in t) for f in FAULTS}
    assert "crash" in by_fault["segv"] and "SIGSEGV" in by_fault["segv"]
    assert "crash" in by_fault["abort"] and "SIGABRT" in by_fault["abort"]
    assert by_fault["hang"].startswith("timeout: no result within 3 s during run")
    assert by_fault["wrong"].startswith("wrong result: output 0 differs")
    assert len(errors) == 4
    ok = [r for r in recs if r.ok]
    assert len(ok) == 8 and all(r.latency_ms > 0 for r in ok)
    assert sum(strategy.notified) == 12
    assert db.best(recs[0].workload, host_target().key()).error is None


def test_schedule_and_compile_errors_are_results(tmp_path):
    task, = extract_tasks(matmul())
    sch = mlc.Schedule(task.module, seed=0)
    space(sch)
    bad = sch.trace.as_json().replace('"matmul"', '"no_such_block"')
    with LocalExecutor(1) as ex:
        inputs = [MeasureInput(task.func_name, str(task.module), bad, host_target()),
                  MeasureInput(task.func_name, "func.func @oops(", sch.trace.as_json(), host_target()),
                  MeasureInput(task.func_name, str(task.module), sch.trace.as_json(), host_target())]
        res = dict(ex.measure(inputs, timeout_s=30))
    assert res[0].error.startswith("schedule error:") and "no_such_block" in res[0].error
    assert res[1].error.startswith("reference error:")
    assert res[2].error is None and len(res[2].latencies_ms) == 3


def test_bad_arguments_raise_tuning_error(tmp_path):
    with pytest.raises(mlc.TuningError, match="trials=0"):
        mlc.tune(matmul(), trials=0, work_dir=str(tmp_path), space=space)
    with pytest.raises(mlc.TuningError, match="timeout_s=0"):
        mlc.tune(matmul(), trials=1, work_dir=str(tmp_path), timeout_s=0)
    with pytest.raises(mlc.TuningError, match="max_workers=0"):
        LocalExecutor(0)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(f.arg("x", (4,)))
    with pytest.raises(mlc.TuningError, match="no unit to tune"):
        extract_tasks(bb.finish())
    np.testing.assert_equal(len(extract_tasks(matmul())), 1)


def test_compare_runs_each_build_in_every_round_and_survives_a_crash():
    task, = extract_tasks(matmul())
    traces = {}
    for fault in (None, "segv", "wrong"):
        sch = mlc.Schedule(task.module, seed=1)
        space(sch, fault) if fault else space(sch)
        traces[fault] = sch.trace.as_json()
    order = [None, "segv", "wrong", None]
    inputs = [MeasureInput(task.func_name, str(task.module), traces[f], host_target(), repeat=2)
              for f in order]
    with LocalExecutor(1) as ex:
        res = ex.compare(inputs, rounds=3, timeout_s=30)
    assert len(res) == 4
    # the inputs after the crash were built again in the restarted worker: 3 rounds x 2 repeats
    for r in (res[0], res[3]):
        assert r.error is None and len(r.latencies_ms) == 6 and all(x > 0 for x in r.latencies_ms)
    assert res[1].error.startswith("crash") and "SIGSEGV" in res[1].error and not res[1].latencies_ms
    assert res[2].error.startswith("wrong result: output 0 differs")


class FakeWorker:
    """Stands for a WorkerProcess in the RunGate tests: records pause and resume."""

    def __init__(self):
        self.calls = []

    def pause(self):
        self.calls.append("pause")

    def resume(self):
        self.calls.append("resume")


def test_an_exclusive_run_pauses_the_builds_instead_of_waiting_for_them():
    from mlc_mlir.tune.measure import RunGate

    gate, w = RunGate(), FakeWorker()
    with gate.build(w):                       # a build in flight on w
        with gate.run(exclusive=False):
            assert w.calls == []              # a run on part of the cores leaves it alone
        with gate.run(exclusive=True):
            assert w.calls == ["pause"]       # no wait for the build: it is stopped
        assert w.calls == ["pause", "resume"]
    with gate.run(exclusive=True):            # the build is over: nothing to pause
        pass
    assert w.calls == ["pause", "resume"]


def test_an_exclusive_run_stops_every_other_worker_of_the_gate_idle_ones_too():
    """An idle worker's OpenMP threads spin for KMP_BLOCKTIME after its own run; an exclusive
    run stops it (and each worker once, building or not), never the worker that runs."""
    from mlc_mlir.tune.measure import RunGate

    runner, idle, building = FakeWorker(), FakeWorker(), FakeWorker()
    gate = RunGate([runner, idle, building])
    with gate.build(building):
        with gate.run(exclusive=False, worker=runner):
            assert idle.calls == building.calls == []
        with gate.run(exclusive=True, worker=runner):
            assert idle.calls == building.calls == ["pause"] and runner.calls == []
    assert idle.calls == building.calls == ["pause", "resume"] and runner.calls == []


def test_an_exclusive_run_leaves_no_cpu_to_another_workers_spinning_openmp_threads():
    """Two real workers with a 2-thread candidate each: right after worker B's run, B's libomp
    threads spin (KMP_BLOCKTIME); during A's exclusive run B is stopped and burns no CPU."""
    import time

    from mlc_mlir.schedule.trace import Trace
    from mlc_mlir.tune.measure import RunGate, WorkerProcess, build_on, run_on

    def stats(pid):   # the fields after the command name of each thread's /proc stat line
        out = []
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                out.append(f.read().rsplit(")", 1)[1].split())
        return out

    def states(pid):
        return [f[0] for f in stats(pid)]

    def cpu_ticks(pid):   # utime + stime of every thread
        return sum(int(f[11]) + int(f[12]) for f in stats(pid))

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux /proc")
    task, = extract_tasks(matmul(128))
    inp = MeasureInput(task.func_name, str(task.module), Trace().as_json(), host_target(),
                       threads=2, number=50, repeat=3)
    a, b = WorkerProcess(), WorkerProcess()
    gate = RunGate([a, b])
    try:
        for w in (a, b):
            assert build_on(w, inp, 0, 120, gate)[0] is None
        for _ in range(3):
            assert run_on(b, 0, 60, gate, True).error is None
            with gate.run(exclusive=True, worker=a):   # what run_on does around A's request
                deadline = time.monotonic() + 10        # SIGSTOP reaches every thread of B
                while set(states(b._proc.pid)) != {"T"} and time.monotonic() < deadline:
                    time.sleep(0.001)
                assert set(states(b._proc.pid)) == {"T"}
                before = cpu_ticks(b._proc.pid)
                assert a.request({"op": "run", "slot": 0, "keep": True}, 60)["error"] is None
                assert cpu_ticks(b._proc.pid) == before
            assert set(states(b._proc.pid)) != {"T"}   # continued after the run
    finally:
        a.close()
        b.close()


def test_time_stopped_by_an_exclusive_run_does_not_count_toward_a_build_timeout():
    """A build stopped by another candidate's exclusive run for longer than its timeout still
    gets its reply (the stop moves the deadline); without the stop the same wait times out."""
    import subprocess
    import threading
    import time

    from mlc_mlir.tune.measure import WorkerFailed, WorkerProcess

    def reply_after(seconds):
        w = WorkerProcess()
        w._proc = subprocess.Popen(["sh", "-c", f"sleep {seconds}; echo '{{\"ok\": 1}}'"],
                                   stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                   start_new_session=True)
        return w

    w = reply_after(0.5)
    w.pause()                                 # stopped at once, for 4 s of a 2 s timeout

    def resume_later():
        time.sleep(4.0)
        w.resume()

    t = threading.Thread(target=resume_later)
    t.start()
    try:
        assert w._read(2.0, "build") == {"ok": 1}
    finally:
        t.join()
        w.close()
    w = reply_after(30)                       # never stopped: the 2 s timeout holds
    try:
        with pytest.raises(WorkerFailed, match="timeout: no result within 2 s during build"):
            w._read(2.0, "build")
    finally:
        w.close()


def _process_state():
    """What of the tuner could outlive it in this process: live Python threads, child
    processes (``/proc/self/task/*/children``), the CPU affinity, the scheduling policy."""
    kids = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/self/task/{tid}/children") as f:
                kids |= set(f.read().split())
    return {"threads": sorted(t.name for t in threading.enumerate()), "children": sorted(kids),
            "affinity": sorted(os.sched_getaffinity(0)), "policy": os.sched_getscheduler(0),
            "nice": os.getpriority(os.PRIO_PROCESS, 0)}


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads Linux /proc")
def test_tune_leaves_no_workers_threads_or_affinity_change_behind(tmp_path):
    # the caller times its compiled model in this process right after tune returns: nothing of
    # the tuner may compete for the cores (a hung candidate's worker is killed and restarted
    # on the way, a crashed one too)
    before = _process_state()
    strategy = PlantedFaults()
    db = mlc.tune(matmul(), trials=6, work_dir=str(tmp_path), space=space, strategy=strategy,
                  timeout_s=3.0, batch_size=5, progress=False)
    assert len(db.records()) >= 6 and any(r.error and r.error.startswith("timeout") for r in db.records())
    after = _process_state()
    assert after == before
    assert not [t for t in threading.enumerate() if t.name.startswith("mlc-tune")]


def test_a_cold_checked_call_over_the_cutoff_leaves_a_fast_candidate_timed_in_full(monkeypatch):
    # The checked call of a small kernel is mostly cold start (0.2 ms for a matmul that runs in
    # 0.018 ms): the cutoff is decided by warm native calls, so a candidate as fast as the best
    # so far gets its full repeats; one slower than the cutoff when warm keeps a single time.
    # WARM_MS is raised to 1 s so that the planted cold call (a 250 ms wait) stays under it
    # however loaded the host is; the 16x16 kernel runs in microseconds.
    from mlc_mlir.tune import worker
    monkeypatch.setattr(worker, "WARM_MS", 1000.0)
    warm_limit_ms = worker.WARM_MS

    task, = extract_tasks(matmul())
    sch = mlc.Schedule(task.module, seed=1)
    space(sch)

    class ColdFirstCall:          # the build's function, its first call made slow on purpose
        def __init__(self, fn):
            self.fn, self.calls = fn, 0

        def __call__(self, *args):
            self.calls += 1
            if self.calls == 1:
                threading.Event().wait(warm_limit_ms / 4e3)
            return self.fn(*args)

        def benchmark(self, *args, **kw):
            return self.fn.benchmark(*args, **kw)

    def run(cutoff_ms):
        w = worker.Worker()
        inp = MeasureInput(task.func_name, str(task.module), sch.trace.as_json(), host_target(),
                           repeat=3, cutoff_ms=cutoff_ms)
        assert w.build(inp)["error"] is None
        w._built[0]["fn"] = ColdFirstCall(w._built[0]["fn"])
        return w.run()

    warm_ms = run(0.0)["latencies_ms"]
    assert len(warm_ms) == 3
    # the cold call alone (warm_limit_ms / 4) is over this cutoff; the kernel is far below it
    full = run(warm_limit_ms / 8)
    assert full["error"] is None and len(full["latencies_ms"]) == 3
    assert max(full["latencies_ms"]) < warm_limit_ms / 8
    cut = run(min(warm_ms) / 1e3)            # a cutoff no call can meet: one warm time kept
    assert cut["error"] is None and len(cut["latencies_ms"]) == 1
    assert cut["latencies_ms"][0] < warm_limit_ms / 8     # a warm probe, not the cold call
