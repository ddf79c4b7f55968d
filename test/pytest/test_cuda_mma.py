"""Tensor cores for f16 matmul: loops bound to ``warpIdx`` (``#gpu.warp``) and the block
annotated ``mlc.mma_sync`` become ``nvgpu.mma.sync`` (``transform.nvgpu.rewrite_matmul_as_mma_sync``);
the default GPU schedule does this for f16 matmuls that divide into warp tiles. PTX with
``mma.sync.aligned.m16n8k16`` is accepted by ptxas; on a GPU results match numpy (skipped)."""

import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
MMA = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"


def _matmul(m=128, k=64, n=128, dtype="float16"):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k), dtype=dtype), f.arg("b", shape=(k, n), dtype=dtype)))
    return bb.finish()


def _warp_schedule(tm=16, tn=8, tk=16, warps=("warpIdx.z", "warpIdx.y")):
    sch = mlc.Schedule(_matmul())
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1, i2 = sch.split(i, [None, 2, tm])
    j0, j1, j2 = sch.split(j, [None, 4, tn])
    k0, k1 = sch.split(k, [None, tk])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, warps[0])
    sch.bind(j1, warps[1])
    sch.annotate(blk, "mlc.mma_sync", True)
    return sch


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_90", "sm_80"])
def test_default_f16_matmul_uses_mma_sync(chip):
    (ptx,) = compile_to_ptx(default_schedule(_matmul(), CUDA), chip=chip).values()
    check_ptx(ptx, arch=chip)
    # 2 x 4 = 8 warps of 32 threads: x is one warp's lanes (mma.sync's lane id is threadIdx.x),
    # y and z count warps
    assert ".maxntid 32, 4, 2" in ptx
    # one mma per k step of 16 (k = 64), the k loop unrolled
    assert ptx.count(MMA) == 4


@needs_ptxas
def test_warp_schedule_by_hand_replays():
    sch = _warp_schedule()
    (ptx,) = compile_to_ptx(sch.mod).values()
    check_ptx(ptx)
    assert MMA in ptx
    again = mlc.Schedule.from_trace(sch.payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(again.as_transform_script()) == str(sch.as_transform_script())


@needs_ptxas
def test_f32_matmul_stays_on_cuda_cores():
    (ptx,) = compile_to_ptx(default_schedule(_matmul(dtype="float32"), CUDA)).values()
    assert "mma.sync" not in ptx and "fma.rn.f32" in ptx


def test_annotated_tile_of_the_wrong_shape_is_a_pipeline_error():
    with pytest.raises(mlc.PipelineError, match=r"mlc.mma_sync has operands.*memref<32x16xf16"):
        compile_to_ptx(_warp_schedule(tm=32).mod)


def test_mma_warps_along_x_are_refused():
    """rewrite_matmul_as_mma_sync takes threadIdx.x as the lane id: 4 warps on x computed wrong
    columns on an H200 (only each row's first 8 outputs were right)."""
    with pytest.raises(mlc.ScheduleError, match="more than one warp to warpIdx.x"):
        _warp_schedule(warps=("warpIdx.y", "warpIdx.x")).mod


def test_threads_and_warps_in_one_block_are_refused():
    sch = mlc.Schedule(_matmul())
    i, j, _ = sch.get_loops(sch.get_block("matmul"))
    i0, i1 = sch.split(i, [None, 2])
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "warpIdx.y")
    sch.bind(j1, "threadIdx.x")
    with pytest.raises(mlc.ScheduleError, match="both threadIdx and warpIdx"):
        sch.mod


@needs_gpu
def test_mma_sync_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((128, 64)) / 4).astype(np.float16)
    b = (rng.standard_normal((64, 128)) / 4).astype(np.float16)
    out = mlc.compile(_matmul(), target="cuda")(a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
