"""target="cuda" default GPU schedules: every op kind lowers to PTX that ptxas accepts; without a
CUDA driver, compiling for execution is a clear ExecutionError; on a GPU, numerics vs numpy."""

import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import apply_default_schedule, default_schedule
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def graph(fn, *shapes):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"x{i}", shape=s) for i, s in enumerate(shapes)]))
    return bb.finish()


CASES = {
    "elementwise": (ops.gelu, [(512, 1024)], lambda x: None),
    "broadcast_add": (ops.add, [(4, 64, 32), (4, 64, 32)], lambda a, b: a + b),
    "row_sum": (lambda x: ops.sum(x, axis=1), [(256, 512)], lambda x: x.sum(1)),
    "softmax": (lambda x: ops.softmax(x, axis=-1), [(128, 256)],
                lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "matmul": (ops.matmul, [(256, 128), (128, 256)], lambda a, b: a @ b),
}


@needs_ptxas
@pytest.mark.parametrize("kind", sorted(CASES))
def test_default_gpu_schedule_ptx(kind):
    fn, shapes, _ = CASES[kind]
    ptx = compile_to_ptx(default_schedule(graph(fn, *shapes), CUDA))
    assert ptx
    for text in ptx.values():
        check_ptx(text, arch="sm_90")
    if kind == "matmul":
        assert any(".shared" in t and "bar.sync" in t for t in ptx.values())


def test_matmul_default_uses_shared_and_local_caches():
    sch = mlc.Schedule(graph(ops.matmul, (256, 128), (128, 256)))
    apply_default_schedule(sch, CUDA)
    kinds = [i.kind for i in sch.trace.insts]
    assert kinds.count("cache_read") == 2 and "cache_write" in kinds and "bind" in kinds


@pytest.mark.skipif(cuda_available(), reason="a CUDA driver is present")
def test_compile_without_driver_is_a_clear_error():
    with pytest.raises(mlc.ExecutionError, match="libcuda.so.1"):
        mlc.compile(graph(ops.relu, (64, 64)), target="cuda")


@needs_gpu
@pytest.mark.parametrize("kind", ["broadcast_add", "row_sum", "softmax", "matmul"])
def test_default_gpu_schedule_numerics(kind):
    fn, shapes, ref = CASES[kind]
    args = [np.random.rand(*s).astype("float32") for s in shapes]
    out = mlc.compile(graph(fn, *shapes), target="cuda")(*args)
    np.testing.assert_allclose(out, ref(*args), rtol=1e-4, atol=1e-5)
