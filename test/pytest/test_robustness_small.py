"""Small robustness cases: object-dtype weights are refused, a database path that is a folder
and a second tuner on a work_dir are clear TuningErrors, an out= array names the property it
lacks, private functions and RemoveUnusedFunctions (the demo's tuning curve staying on disk is in
test_demo.py, on the demo run there)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.tune import Database


@pytest.mark.parametrize("use", ["dense", "matmul", "add", "conv_bias", "param"])
def test_object_dtype_weights_are_refused(use):
    w = np.array([[1.0, None], [2.0, 3.0]], dtype=object)
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match="dtype: object is not supported"):
        with bb.function("main") as f:
            x = f.arg("x", (2, 2))
            if use == "dense":
                ops.dense(x, w)
            elif use == "matmul":
                ops.matmul(x, w)
            elif use == "add":
                ops.add(x, w)
            elif use == "conv_bias":
                ops.conv2d(ops.reshape(x, (1, 1, 2, 2)), np.ones((2, 1, 1, 1), np.float32),
                           bias=np.array([None, 1.0], dtype=object))
            else:
                f.param("w", w)


def test_database_on_a_folder_is_a_tuning_error(tmp_path):
    with pytest.raises(mlc.TuningError, match="cannot read .*Is a directory"):
        Database(tmp_path)


def _module():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", (4, 4))))
    return bb.finish()


def test_second_tuner_on_a_work_dir_is_refused(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from mlc_mlir.tune import Database
        with Database({str(tmp_path / "database.jsonl")!r}).exclusive():
            print("locked", flush=True)
            sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(mlc.TuningError, match=rf"in use by another tuner \(pid {holder.pid} "):
            mlc.tune(_module(), trials=1, work_dir=str(tmp_path), progress=False)
    finally:
        holder.kill()
        holder.wait()
    with Database(tmp_path / "database.jsonl").exclusive():  # a dead holder's lock is gone
        pass


def test_exclusive_rereads_what_an_earlier_holder_committed(tmp_path):
    from mlc_mlir.tune import TuningRecord
    from mlc_mlir.tune.record import candidate_id
    waiting = Database(tmp_path / "db.jsonl")
    with Database(tmp_path / "db.jsonl").exclusive() as first:
        first.commit(TuningRecord("w", "t", "{}", {}, (1.0,), None, 0.0, candidate_id("w", "t", "{}"),
                                  "f", {}, 1.0))
    assert len(waiting) == 0
    with waiting.exclusive():
        assert len(waiting) == 1 and waiting.has_candidate(candidate_id("w", "t", "{}"))


@pytest.mark.parametrize("out, what", [
    (np.zeros((2, 4), np.float64), r"has dtype float64; expected float32"),
    (np.zeros((4, 2), np.float32), r"has shape \(4, 2\); expected \(2, 4\)"),
    (np.zeros((2, 8), np.float32)[:, ::2], r"is not C-contiguous"),
    ("readonly", r"is read-only"),
    ([[0.0] * 4] * 2, r"is a list; expected a numpy.ndarray"),
])
def test_out_array_names_the_failed_property(out, what):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", (2, 4))))
    exe = mlc.compile(bb.finish())
    if isinstance(out, str):
        out = np.zeros((2, 4), np.float32)
        out.flags.writeable = False
    with pytest.raises(mlc.ExecutionError, match=what):
        exe(np.ones((2, 4), np.float32), out=[out])


def _three_functions():
    bb = mlc.GraphBuilder()
    with bb.function("add_func") as f:
        f.output(ops.add(f.arg("a1", (1,)), f.arg("a2", (1,))))
    with bb.function("helper", private=True) as f:
        f.output(ops.relu(f.arg("x", (4,))))
    with bb.function("unused_helper", private=True) as f:
        f.output(ops.exp(f.arg("x", (4,))))
    with bb.function("main") as f:
        f.output(f.call("helper", f.arg("x", (4,))))
    return bb.finish()


def test_private_functions_and_remove_unused_functions():
    mod = _three_functions()
    assert mod.function_names(public_only=True) == ["add_func", "main"]
    assert graph.DeadCodeElimination()(mod).function_names() == ["add_func", "helper", "main"]
    kept = graph.RemoveUnusedFunctions()(mod)            # the seed: entry function "main"
    assert kept.function_names() == ["helper", "main"]
    assert kept.function_names(public_only=True) == ["main"]
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(mlc.compile(kept)(x), np.maximum(x, 0))
    assert graph.RemoveUnusedFunctions(["add_func"])(mod).function_names() == ["add_func"]
    with pytest.raises(mlc.IRError, match=r"entry function\(s\) \['nope'\]"):
        graph.RemoveUnusedFunctions(["nope"])(mod)
    with pytest.raises(mlc.BuildError, match="'private'"):
        with mlc.GraphBuilder().function("f", private="yes"):
            pass


def test_dead_ops_do_not_reach_the_schedule_rules():
    """A dead int64 op beside a live one of another rank (ONNX Attention's unused causal offset)
    aborted the schedule with "too many tiles provided"; the graph stage erases dead ops."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        n = f.arg("n", (2,), dtype="int64")
        ops.subtract(ops.cast(n, "int64"), np.int64(4))       # dead
        keys = np.arange(6).reshape(1, 1, 1, 6).astype(np.int64)
        valid = ops.less(keys, ops.reshape(ops.cast(n, "int64"), (2, 1, 1, 1)))
        f.output(ops.where(valid, np.zeros((), np.float32), np.full((), -np.inf, np.float32)))
    nv = np.array([3, 5])
    ref = np.where(np.arange(6).reshape(1, 1, 1, 6) < nv.reshape(2, 1, 1, 1), 0, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(mlc.compile(bb.finish())(nv), ref)
