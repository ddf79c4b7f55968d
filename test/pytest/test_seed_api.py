"""The course's calls work as written: the stochastic schedule of "Automatic Program
Optimization" (``sch.get_block("C", "main")``, keyword arguments as in TVM) as the tuner's space,
``db.best()`` without arguments it can infer, ``mlc.compile(mod, database=db)``, and
``graph.FoldConstant()`` without an evaluator (the compiler registered when ``mlc_mlir`` is
imported), each checked against numpy."""

import importlib.util
import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.graph import fold_constant
from mlc_mlir.target import host_target


def _walkthrough():
    """``examples/01_schedule_walkthrough.py`` as a module: its schedule functions are the
    course's, call for call."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "01_schedule_walkthrough.py")
    spec = importlib.util.spec_from_file_location("walkthrough", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tune_with_the_course_space_then_compile(tmp_path):
    course = _walkthrough()
    mod = course.build_matmul(64)
    db = mlc.tune(mod, target="cpu", trials=4, space=course.stochastic_schedule_mm,
                  work_dir=str(tmp_path), progress=False)
    best = db.best()
    assert best is not None and best.ok
    assert best == db.best("fused_C") == db.best(best.workload, host_target()) == db.best(target="cpu")
    sch_tuned = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(best.trace))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 64, 64)).astype(np.float32)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(mlc.compile(sch_tuned.mod)(a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mlc.compile(mod, database=db)(a, b), want, rtol=1e-4, atol=1e-4)
    # every candidate of the space ran in the task as the user's function "main"
    assert not [r.error for r in db.records() if r.error]


def test_fold_constant_without_an_evaluator(rng):
    """A constant subgraph numpy does not evaluate (an elementwise add of two weights) is
    compiled and run by the registered evaluator."""
    w1, w2 = rng.standard_normal((2, 8, 8)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (4, 8))
        f.output(ops.matmul(x, ops.add(mlc.constant(w1), mlc.constant(w2))))
    mod = bb.finish()
    folded = graph.FoldConstant()(mod)
    assert "linalg.generic" not in str(folded.get_function("main"))
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(folded)(x), x @ (w1 + w2), rtol=1e-5, atol=1e-5)


def test_without_a_registered_evaluator_the_error_names_the_fix(monkeypatch, rng):
    """With no evaluator registered (the graph layer used without the pipeline), a fold that
    needs compiling raises a clear error naming the fix."""
    monkeypatch.setattr(fold_constant, "_DEFAULT_EVALUATOR", [])
    w = rng.standard_normal((2, 8, 8)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("x", (8, 8)), ops.add(mlc.constant(w[0]), mlc.constant(w[1]))))
    with pytest.raises(mlc.PipelineError, match="no evaluator is registered.*FoldConstant\\(mlc.compile\\)"):
        graph.FoldConstant()(bb.finish())
