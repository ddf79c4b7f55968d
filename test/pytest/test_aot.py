"""AOT: export a compiled module as a .so and load it back in a fresh process, no recompiling."""

import os
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops


def _module(params: bool):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((32, 16)).astype(np.float32)
    b0 = rng.standard_normal(32).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(8, 16))
        w = f.param("w0", w0) if params else w0
        f.output(ops.relu(ops.dense(x, w, b0)))
    return bb.finish(), lambda xn: np.maximum(xn @ w0.T + b0, 0)


@pytest.mark.parametrize("params", [False, True])
def test_export_and_load_in_fresh_process(tmp_path, params):
    mod, ref = _module(params)
    exe = mlc.compile(mod)
    lib = exe.export_library(str(tmp_path / "mlp.so"))
    assert os.path.exists(lib) and os.path.exists(lib + ".json")
    assert os.path.exists(lib + ".params.npz") == params
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (f"import numpy as np, mlc_mlir.runtime as rt\n"
            f"lib = rt.load_library({lib!r})\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, lib(np.load({str(tmp_path / 'x.npy')!r})))\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, exe(x), rtol=1e-6)
    np.testing.assert_allclose(y, ref(x), rtol=1e-4, atol=1e-4)


def test_loaded_library_validates_inputs(tmp_path):
    mod, _ = _module(False)
    lib = mlc.runtime.load_library(mlc.compile(mod).export_library(str(tmp_path / "m.so")))
    with pytest.raises(mlc.ExecutionError, match=r"argument 'x' has shape \(2, 16\); expected \(8, 16\)"):
        lib(np.zeros((2, 16), np.float32))
    with pytest.raises(mlc.ExecutionError, match="no LLVM module to export"):
        lib.export_library(str(tmp_path / "again.so"))


def test_load_missing_library_is_clean(tmp_path):
    with pytest.raises(mlc.ExecutionError, match="cannot load"):
        mlc.runtime.load_library(str(tmp_path / "nope.so"))
