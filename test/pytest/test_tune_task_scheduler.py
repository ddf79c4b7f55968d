"""The task scheduler: round-robin warm-up, then trials go to the task with the largest
expected gain (weight x latency improvement); exhausted and converged tasks are skipped. And the default
space (schedule rules) drives a tune when no space is given."""

import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.tune import TuningRecord
from mlc_mlir.tune.task_scheduler import TaskScheduler


def _rec(lat, error=None):
    return TuningRecord("w", "t", "{}", {}, () if error else (lat,), error, time.time(), str(lat))


def test_warm_up_then_weighted_gain_then_exhaustion():
    s = TaskScheduler([1, 10], [[], []])
    assert s.next_task() == 0
    s.update(0, [_rec(1.0)])
    assert s.next_task() == 1                     # warm-up: every task gets a batch first
    s.update(1, [_rec(1.0)])
    assert s.next_task() == 1                     # equal latency, ten times the weight
    s.exhaust(1)
    assert s.next_task() == 0
    s.exhaust(0)
    assert s.next_task() is None


def test_a_task_that_stops_improving_converges_and_yields():
    s = TaskScheduler([1, 1], [[_rec(1.0)], [_rec(1.0)]], patience=4)
    s.update(0, [_rec(0.5), _rec(0.9)])           # task 0 improves: its patience restarts
    s.update(1, [_rec(0.995), _rec(1.2)])          # 0.5 % better: within noise, no improvement
    assert not s.converged(0) and not s.converged(1)
    s.update(0, [_rec(0.3)] * 2)
    s.update(1, [_rec(0.991)] * 2)                 # 4 trials without a 2 % gain
    assert not s.converged(0) and s.converged(1)
    assert s.next_task() == 0
    s.update(0, [_rec(0.3)] * 4)
    assert s.converged(0) and s.next_task() is None
    assert not TaskScheduler([1], [[_rec(1.0)]], patience=None).converged(0)


def _recs(*repeats):
    return TuningRecord("w", "t", "{}", {}, tuple(repeats), None, time.time(), str(repeats))


def test_an_improvement_within_the_repeat_noise_does_not_count():
    """On a machine whose repeats of one candidate differ by 10 %, a new best 5 % lower is
    noise (the task converges); 15 % lower counts. Repeats within 1 % keep the 2 % floor."""
    noisy = TaskScheduler([1], [[_recs(1.0, 1.1, 1.05)]], patience=4)
    assert abs(noisy.tasks[0].noise() - 0.10) < 1e-9
    noisy.update(0, [_recs(0.95, 1.04, 1.0)] * 2)
    noisy.update(0, [_recs(0.95, 1.05, 1.0)] * 2)   # 4 trials, each 5 % better than the first
    assert noisy.converged(0)
    noisy = TaskScheduler([1], [[_recs(1.0, 1.1, 1.05)]], patience=4)
    noisy.update(0, [_recs(0.85, 0.93, 0.9)] * 2)   # 15 % better: an improvement
    noisy.update(0, [_recs(0.85, 0.93, 0.9)] * 2)
    assert not noisy.converged(0)
    quiet = TaskScheduler([1], [[_recs(1.0, 1.005, 1.01)]], patience=4)
    assert quiet.tasks[0].noise() == 0.02
    quiet.update(0, [_recs(0.97, 0.975, 0.98)] * 4)   # 3 % better: counts on a quiet machine
    assert not quiet.converged(0)


def test_failing_task_keeps_priority_for_a_while():
    s = TaskScheduler([1, 1], [[_rec(1.0)], [_rec(0, error="crash")]])
    assert s.tasks[1].gain() == float("inf")
    s.update(1, [_rec(0, error="crash")] * 20)
    assert s.tasks[1].gain() == 0.0


def test_tune_with_the_default_space(tmp_path):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.matmul(f.arg("a", (16, 32)), f.arg("b", (32, 16)))))
    mod = bb.finish()
    db = mlc.tune(mod, trials=4, work_dir=str(tmp_path), progress=False)
    assert len([r for r in db.records() if not r.final]) == 4 and any(r.ok for r in db.records())
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    out = mlc.compile(mlc.tune.apply_best(mod, db))(a, b)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
