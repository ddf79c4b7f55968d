"""compile(..., flush_denormals=True): subnormals read and written as zero inside the compiled
code (calling thread and OpenMP workers), and the caller's MXCSR restored afterwards."""

import platform

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="MXCSR is x86-only")

TINY = np.finfo(np.float32).tiny  # smallest normal float32, 1.18e-38


def _multiply(n=64, parallel=False):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.multiply(f.arg("a", shape=(n, 16)), f.arg("b", shape=(n, 16))))
    mod = bb.finish()
    if parallel:
        sch = mlc.Schedule(mod)
        blk = sch.get_block("multiply")
        i, _ = sch.get_loops(blk)
        i0, _ = sch.split(i, [2, None])
        sch.parallel(i0)
        mod = sch.mod
        assert "scf.forall" in str(mod)
    return mod


def _inputs(n=64):
    a = np.full((n, 16), 1e-20, np.float32)
    b = np.full((n, 16), 1e-20, np.float32)  # a * b = 1e-40: subnormal
    a[:, 0] = 1e-40                             # a subnormal input (DAZ reads it as 0)
    b[:, 0] = 1.0
    return a, b


@pytest.mark.parametrize("parallel", [False, True])
def test_subnormal_results_and_inputs_become_zero(parallel):
    a, b = _inputs()
    keep = mlc.compile(_multiply(parallel=parallel))(a, b)
    flush = mlc.compile(_multiply(parallel=parallel), flush_denormals=True)(a, b)
    np.testing.assert_array_equal(keep, a * b)           # default: numpy's IEEE results
    assert (np.abs(keep) < TINY).all() and (keep != 0).all()
    np.testing.assert_array_equal(flush, np.zeros_like(flush))


def test_normal_values_unchanged():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 16)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(mlc.compile(_multiply(), flush_denormals=True)(a, b), a * b)


def test_caller_mxcsr_is_restored():
    a, b = _inputs()
    exe = mlc.compile(_multiply(parallel=True), flush_denormals=True)
    exe(a, b)
    # numpy in this thread still produces subnormals: MXCSR was put back on return
    assert np.float32(1e-20) * np.float32(1e-20) != 0


def test_stage_is_in_the_lowered_ir(tmp_path):
    mlc.compile(_multiply(parallel=True), flush_denormals=True, dump_ir=str(tmp_path))
    text = (tmp_path / "08-denormals.mlir").read_text()
    assert text.count('"llvm.x86.sse.ldmxcsr"') >= 4  # set + restore in main, its wrapper, omp.parallel


def test_exported_library_keeps_the_flush(tmp_path):
    a, b = _inputs()
    path = mlc.compile(_multiply(parallel=True), flush_denormals=True).export_library(str(tmp_path / "ftz.so"))
    lib = mlc.runtime.load_library(path)
    np.testing.assert_array_equal(lib(a, b), np.zeros_like(a))
    assert np.float32(1e-20) * np.float32(1e-20) != 0
