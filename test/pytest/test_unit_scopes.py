"""Schedule stage: units of a large graph function are scheduled each in a function of its own
and inlined back (``mlc_mlir.pipeline.unit_scopes``); numerics against numpy, and the scheduled
module holds no trace of the scoping."""

import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline import CompileOptions, unit_scopes

_compile = sys.modules["mlc_mlir.pipeline.compile"]


def _model(seed: int = 0):
    """Distinct dense + bias + relu layers (widths differ: no unit is shared), two branches
    concatenated (a consumer that writes in place), and the numpy reference."""
    rng = np.random.default_rng(seed)
    widths = [32, 48, 40, 24]
    ws = [rng.standard_normal((o, i)).astype(np.float32) / np.sqrt(i)
          for i, o in zip(widths, widths[1:])]
    bs = [rng.standard_normal(w.shape[0]).astype(np.float32) for w in ws]
    wb = rng.standard_normal((16, 32)).astype(np.float32) / 6
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 32), dtype="float32")
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = ops.relu(ops.dense(h, w, b, name=f"fc{i}"), name=f"relu{i}")
        g = ops.sigmoid(ops.dense(x, wb, name="side"))
        f.output(ops.concat([h, g], axis=1))

    def reference(xv):
        y = xv
        for w, b in zip(ws, bs):
            y = np.maximum(y @ w.T + b, 0)
        return np.concatenate([y, 1 / (1 + np.exp(-(xv @ wb.T)))], axis=1)

    return bb.finish(), reference


@pytest.mark.parametrize("min_ops", [0, 10**9])
def test_units_scheduled_apart_compute_what_numpy_does(monkeypatch, min_ops):
    monkeypatch.setattr(unit_scopes, "MIN_OPS", min_ops)
    mod, reference = _model()
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(x), reference(x), rtol=1e-4, atol=1e-4)


def test_scoped_units_are_inlined_back(monkeypatch):
    monkeypatch.setattr(unit_scopes, "MIN_OPS", 0)
    mod, _ = _model()
    opts = CompileOptions(target="cpu", threads=1)
    tasks = _compile.run_stages(mod, opts, until="tasks")[1]
    outlined, made = unit_scopes.outline_units(tasks, tasks.function_names())
    assert len(made) >= 2 and set(made) <= set(outlined.function_names())
    scheduled = _compile.run_stages(mod, opts, until="schedule")[1]
    assert scheduled.function_names() == tasks.function_names()
    text = str(scheduled)
    assert unit_scopes.SCOPE_ATTR not in text and "func.call" not in text and "mlc.held_call" not in text
    assert "vector.transfer_write" in text   # scheduled (vectorized), not left as plain linalg
