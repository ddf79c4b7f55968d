"""Workload keys: equal for functions equal up to names and weight values, different otherwise."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import IRError
from mlc_mlir.ir.workload import canonical_names, workload_key


def _dense_relu(fname, w, op_name=None, act=ops.relu):
    bb = mlc.GraphBuilder()
    with bb.function(fname) as f:
        x = f.arg("x", (2, 8))
        f.output(act(ops.dense(x, w, name=op_name or f"d_{fname}")))
    return bb.finish()


def test_same_structure_other_names_and_weights_is_one_workload(rng):
    a = _dense_relu("f", rng.standard_normal((4, 8)).astype(np.float32))
    b = _dense_relu("g", rng.standard_normal((4, 8)).astype(np.float32), op_name="layer7")
    assert workload_key(a, "f") == workload_key(b, "g")
    assert list(canonical_names(a, "f").values()) == list(canonical_names(b, "g").values())
    assert canonical_names(b, "g")["layer7"] == canonical_names(a, "f")["d_f"]


@pytest.mark.parametrize("other", [
    lambda rng: _dense_relu("g", rng.standard_normal((5, 8)).astype(np.float32)),   # shape
    lambda rng: _dense_relu("g", rng.standard_normal((4, 8)).astype(np.float32), act=ops.tanh),  # op
])
def test_other_shapes_or_ops_are_other_workloads(rng, other):
    a = _dense_relu("f", rng.standard_normal((4, 8)).astype(np.float32))
    assert workload_key(a, "f") != workload_key(other(rng), "g")


def test_function_with_calls_is_not_a_workload():
    bb = mlc.GraphBuilder()
    with bb.function("inner") as f:
        f.output(ops.relu(f.arg("x", (4,))))
    with bb.function("main") as f:
        f.output(f.call("inner", f.arg("x", (4,))))
    mod = bb.finish()
    assert len(workload_key(mod, "inner")) == 64
    with pytest.raises(IRError, match="calls other functions"):
        workload_key(mod, "main")
