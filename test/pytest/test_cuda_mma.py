"""Tensor cores for f16 matmul: loops bound to ``warpIdx`` (``#gpu.warp``) and the block
annotated ``mlc.mma_sync`` become ``nvgpu.mma.sync``. The default GPU schedule stages ``A``/``B``
panels in shared memory (``cp.async``) and reads the fragments with ``ldmatrix``, ``C`` in
registers across ``k`` (:mod:`mlc_mlir.pipeline.cuda_mma`); the one-tile-per-warp form
(``rewrite_matmul_as_mma_sync``) stays a decision. PTX is accepted by ptxas without spills; on a
GPU results match numpy (skipped without a driver)."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.pipeline.cuda_mma import drop_copy_barriers
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.schedule.rules.gpu_mma import (mma_lane_registers, mma_tile_defaults, resident_warps,
                                              schedule_matmul_mma)
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
MMA = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
LDMATRIX_A = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
LDMATRIX_B = "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"
CP_ASYNC = re.compile(r"cp\.async\.cg\.shared\.global \[%rd\d+(?:\+\d+)?\], \[%rd\d+(?:\+\d+)?\], 16;")


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


def _ptxas_spills(ptx: str, chip: str = "sm_90") -> list:
    """``(spill stores, spill loads)`` of each kernel, from ``ptxas -v``."""
    out = check_ptx(ptx, chip, verbose=True)
    return [tuple(map(int, m)) for m in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)]


def _default_ptx(m, k, n, chip="sm_90"):
    (ptx,) = compile_to_ptx(default_schedule(_matmul(m, k, n), CUDA), chip=chip).values()
    check_ptx(ptx, arch=chip)
    return ptx


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_90", "sm_80"])
def test_default_f16_matmul_stages_panels_for_ldmatrix(chip):
    """128x64 @ 64x128: two blocks of 2 x 2 warps (x is one warp's lanes), each warp a 64 x 32
    tile of 4 x 4 mma tiles (the 64 x 64 default halved: one block would remain) over k panels
    of 32 (unrolled: k = 64)."""
    ptx = _default_ptx(128, 64, 128, chip)
    assert ".maxntid 32, 2, 2" in ptx
    assert ptx.count(MMA) == 4 * 4 * 2 * 2
    # A fragments: ldmatrix x4 from shared memory; B: x2 transposed (B is k x n, row-major)
    assert ptx.count(LDMATRIX_A) == 4 * 2 * 2 and ptx.count(LDMATRIX_B) == 4 * 2 * 2
    # the panels arrive by 16-byte cp.async (128x32 + 32x64 halves over 128 threads: 4 + 2
    # each per k panel), waited before the barrier; no other global load
    assert len(CP_ASYNC.findall(ptx)) == (4 + 2) * 2 and "cp.async.wait_group" in ptx
    # both panels of a k step in one group (the barrier between their copies is dropped)
    assert ptx.count("cp.async.commit_group") == 2
    assert "ld.global" not in ptx and "ld.shared" not in ptx
    # the panels are swizzled (nvgpu-optimize-shared-memory): XOR on the shared addresses
    assert "xor.b" in ptx
    # C is stored once: 64 x 32 / 32 lanes = 64 halves per thread (no zero fill, no per-step store;
    # pairs of halves go out as one 32-bit store where the 16-byte aligned buffer allows)
    halves = {"b16": 1, "b32": 2, "v2.b32": 4, "v4.b32": 8}
    assert sum(halves[w] for w in re.findall(r"\bst\.global\.((?:v[24]\.)?b(?:16|32))", ptx)) == 64
    assert _ptxas_spills(ptx, chip) == [(0, 0)]


@needs_ptxas
@pytest.mark.parametrize("m,k,n", [(256, 256, 256), (1024, 1024, 1024), (192, 96, 320)])
def test_default_f16_mma_kernels_assemble_without_spills(m, k, n):
    ptx = _default_ptx(m, k, n)
    assert LDMATRIX_A in ptx and LDMATRIX_B in ptx and CP_ASYNC.search(ptx) and MMA in ptx
    assert "ld.global" not in ptx and "ld.local" not in ptx
    assert _ptxas_spills(ptx) == [(0, 0)]


@needs_ptxas
def test_default_f16_mma_pipelines_the_panel_copies():
    """1024^3: two buffers per panel (2 x (128x32 + 32x128) f16 = 32 KiB), the k loop waits for
    all but the newest cp.async group (the next panels load while the warps compute)."""
    ptx = _default_ptx(1024, 1024, 1024)
    assert re.search(r"cp\.async\.wait_group\s+1;", ptx)
    assert "32768 bytes smem" in check_ptx(ptx, verbose=True)
    one = mlc.Schedule(_matmul(1024, 1024, 1024))
    schedule_matmul_mma(one, one.get_block("matmul"), CUDA.cuda_arch, forced=dict(
        mma_tile_defaults(1024, 1024, 1024, CUDA.cuda_arch), staged=1, stages=1))
    (ptx1,) = compile_to_ptx(one.mod).values()
    assert not re.search(r"cp\.async\.wait_group\s+1;", ptx1) and "16384 bytes smem" in check_ptx(ptx1, verbose=True)


def test_mma_tile_defaults_follow_the_register_budget():
    arch = CUDA.cuda_arch
    # a quarter of the 256 registers a thread addresses holds 64 x 64 f16 accumulators per warp
    # (64 per lane); at ~160 registers per lane an SM keeps three blocks of 2 x 2 warps (12
    # warps) and one of 8: 2 x 2, CUTLASS's 128 x 128 block
    assert mma_lane_registers(64, 64) == 160 and mma_lane_registers(64, 32) == 112
    assert resident_warps(arch, 4, 160) == 12 and resident_warps(arch, 8, 160) == 8
    assert mma_tile_defaults(4096, 4096, 4096, arch) == {"wy": 2, "wx": 2, "wm": 64, "wn": 64, "kt": 32,
                                                          "stages": 2}
    # halved until the dims divide (192 = 2 x 3 x 32, 320 = 2 x 5 x 32) and two blocks remain
    assert mma_tile_defaults(192, 320, 96, arch) == {"wy": 2, "wx": 2, "wm": 32, "wn": 32, "kt": 32,
                                                        "stages": 2}
    assert mma_tile_defaults(128, 128, 64, arch)["wn"] == 32
    # two buffers of the 128x32 + 32x128 f16 panels take 32 KiB: one where 16 KiB is the limit
    small = dataclasses.replace(arch, static_shared_bytes_per_block=16 << 10)
    assert mma_tile_defaults(4096, 4096, 4096, small)["stages"] == 1
    assert mma_tile_defaults(32, 32, 64, arch)["wm"] == 16   # 2 blocks of 2 x 2 warps of 16 x 8
    assert mma_tile_defaults(32, 16, 64, arch) is None      # one block even of 16 x 8 tiles
    assert mma_tile_defaults(128, 100, 64, arch) is None


@needs_ptxas
def test_unstaged_mma_form_is_a_decision():
    """staged = 0: one 16 x 8 tile per warp read from global memory (the previous default)."""
    sch = mlc.Schedule(_matmul())
    assert schedule_matmul_mma(sch, sch.get_block("matmul"), CUDA.cuda_arch, forced={"staged": 0})
    (ptx,) = compile_to_ptx(sch.mod).values()
    check_ptx(ptx)
    assert ptx.count(MMA) == 4 and "ldmatrix" not in ptx and "cp.async" not in ptx


@needs_ptxas
def test_forced_mma_tiles_replay():
    forced = {"staged": 1, "wy": 2, "wx": 2, "wm": 32, "wn": 32, "kt": 16, "stages": 3}
    sch = mlc.Schedule(_matmul(128, 64, 128))
    schedule_matmul_mma(sch, sch.get_block("matmul"), CUDA.cuda_arch, forced=forced)
    (ptx,) = compile_to_ptx(sch.mod).values()
    check_ptx(ptx)
    assert ".maxntid 32, 2, 2" in ptx and LDMATRIX_A in ptx
    with pytest.raises(mlc.ScheduleError):
        schedule_matmul_mma(mlc.Schedule(_matmul()), sch.get_block("matmul"), CUDA.cuda_arch,
                            forced=dict(forced, wm=48))


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
    with pytest.raises(mlc.PipelineError, match=r"mlc.mma_sync has operands.*memref<8x16xf16"):
        compile_to_ptx(_warp_schedule(tm=8).mod)


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


def _check_cuda(sch_or_mod, m, k, n):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((m, k)) / 4).astype(np.float16)
    b = (rng.standard_normal((k, n)) / 4).astype(np.float16)
    out = mlc.compile(sch_or_mod, target="cuda")(a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    # f16 accumulation (the op's result type): error grows with sqrt(k) ulps of |C|
    tol = 2e-2 * max(1.0, (k / 64) ** 0.5)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=tol, atol=tol)


@needs_gpu
@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (256, 256, 256), (1024, 1024, 1024), (192, 96, 320)])
def test_cuda_staged_mma_matmul_matches_numpy(m, k, n):
    _check_cuda(_matmul(m, k, n), m, k, n)


DECISIONS = [{"staged": 0},
             {"staged": 1, "wy": 2, "wx": 2, "wm": 64, "wn": 64, "kt": 32, "stages": 1},
             {"staged": 1, "wy": 2, "wx": 2, "wm": 64, "wn": 64, "kt": 32, "stages": 3},
             {"staged": 1, "wy": 1, "wx": 4, "wm": 32, "wn": 16, "kt": 64, "stages": 2},
             {"staged": 1, "wy": 2, "wx": 4, "wm": 64, "wn": 64, "kt": 32, "stages": 2}]


def _forced(forced, m=256, k=128, n=256):
    sch = mlc.Schedule(_matmul(m, k, n))
    schedule_matmul_mma(sch, sch.get_block("matmul"), CUDA.cuda_arch, forced=forced)
    return sch


@needs_ptxas
@pytest.mark.parametrize("forced", DECISIONS)
def test_mma_decisions_assemble_and_replay(forced):
    sch = _forced(forced)
    (ptx,) = compile_to_ptx(sch.mod).values()
    check_ptx(ptx)
    assert MMA in ptx and _ptxas_spills(ptx) == [(0, 0)]
    assert ("ldmatrix" in ptx) == bool(forced["staged"])
    # no register cap on a tensor-core kernel: held to 128, the 2 x 4 warps of 64 x 64 tiles
    # spilled (60 bytes) in the k loop
    assert ".maxnreg" not in ptx
    again = mlc.Schedule.from_trace(sch.payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(again.as_transform_script()) == str(sch.as_transform_script())


@needs_gpu
@pytest.mark.parametrize("forced", DECISIONS)
def test_cuda_mma_decisions_match_numpy(forced):
    _check_cuda(_forced(forced).mod, 256, 128, 256)


_COPIES = """
func.func @f(%a: memref<64xf16>, %b: memref<64xf16>, %c: memref<64xf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %p = arith.constant 0.0 : f16
  gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
             threads(%tx, %ty, %tz) in (%u = %c8, %v = %c1, %w = %c1) {
    %sa = memref.alloc() : memref<64xf16, #gpu.address_space<workgroup>>
    %sb = memref.alloc() : memref<64xf16, #gpu.address_space<workgroup>>
    gpu.barrier
    scf.for %i = %c0 to %c8 step %c1 {
      %o = arith.muli %tx, %c8 : index
      %va = vector.transfer_read %a[%o], %p {in_bounds = [true]} : memref<64xf16>, vector<8xf16>
      vector.transfer_write %va, %sa[%o] {in_bounds = [true]} : vector<8xf16>, memref<64xf16, #gpu.address_space<workgroup>>
      gpu.barrier
      %vb = vector.transfer_read %b[%o], %p {in_bounds = [true]} : memref<64xf16>, vector<8xf16>
      vector.transfer_write %vb, %sb[%o] {in_bounds = [true]} : vector<8xf16>, memref<64xf16, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = vector.transfer_read READ[%c0], %p {in_bounds = [true]} : memref<64xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      vector.transfer_write %r, %c[%o] {in_bounds = [true]} : vector<8xf16>, memref<64xf16>
      TAIL
    }
    gpu.terminator
  }
  return
}
"""


@pytest.mark.parametrize("read,tail,erased", [
    ("%sb", "gpu.barrier", 1),   # B's copy neither reads nor writes A: the barrier goes
    ("%sb", "", 0),              # the previous iteration's read of B may still run
])
def test_drop_copy_barriers_only_between_independent_copies(read, tail, erased):
    mod = Module.parse(_COPIES.replace("READ", read).replace("TAIL", tail))
    assert drop_copy_barriers(mod) == erased
    assert drop_copy_barriers(mod) == 0


def _matmul_bias_relu(m=256, k=128, n=256):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        y = ops.matmul(f.arg("a", shape=(m, k), dtype="float16"), f.arg("b", shape=(k, n), dtype="float16"))
        f.output(ops.relu(ops.add(y, f.arg("bias", shape=(n,), dtype="float16"))))
    return bb.finish()


@needs_ptxas
def test_mma_kernel_next_to_elementwise_kernels():
    """convert-vector-to-gpu fails on any scalar float op in its scope: the bias and relu
    kernels' bodies must stay out of it (the warp kernel is converted on its own)."""
    ptx = compile_to_ptx(default_schedule(_matmul_bias_relu(), CUDA))
    for text in ptx.values():
        check_ptx(text)
    assert sum(LDMATRIX_A in text for text in ptx.values()) == 1 and len(ptx) >= 2


@needs_gpu
def test_cuda_mma_matmul_bias_relu_matches_numpy():
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((256, 128)) / 4).astype(np.float16)
    b = (rng.standard_normal((128, 256)) / 4).astype(np.float16)
    bias = rng.standard_normal(256).astype(np.float16)
    out = mlc.compile(_matmul_bias_relu(), target="cuda")(a, b, bias)
    ref = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32), 0)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=3e-2, atol=3e-2)


def _two_matmuls():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(256, 128), dtype="float16")
        y1 = ops.matmul(x, f.arg("w1", shape=(128, 256), dtype="float16"))
        f.output(ops.add(y1, ops.matmul(x, f.arg("w2", shape=(128, 256), dtype="float16"))))
    return bb.finish()


@needs_ptxas
def test_two_mma_kernels_in_one_function():
    """Each warp kernel is rewritten on its own (the transform ops take one target each); a
    one-tile kernel (staged = 0) beside a 3-stage one keeps its own lowering."""
    ptx = compile_to_ptx(default_schedule(_two_matmuls(), CUDA))
    assert sum(LDMATRIX_A in text for text in ptx.values()) == 2
    sch = mlc.Schedule(_two_matmuls())
    schedule_matmul_mma(sch, sch.get_block("matmul"), CUDA.cuda_arch, forced={"staged": 0})
    schedule_matmul_mma(sch, sch.get_block("matmul_1"), CUDA.cuda_arch, forced={"stages": 3})
    texts = list(compile_to_ptx(default_schedule(sch.mod, CUDA)).values())   # + the add
    for text in texts:
        check_ptx(text)
    assert sorted(LDMATRIX_A in t for t in texts if MMA in t) == [False, True]


@needs_gpu
def test_cuda_two_mma_kernels_match_numpy():
    rng = np.random.default_rng(2)
    x, w1, w2 = ((rng.standard_normal(s) / 4).astype(np.float16)
                 for s in ((256, 128), (128, 256), (128, 256)))
    out = mlc.compile(_two_matmuls(), target="cuda")(x, w1, w2)
    ref = x.astype(np.float32) @ w1.astype(np.float32) + x.astype(np.float32) @ w2.astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=4e-2, atol=4e-2)


_CHILD = """
import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import compile_to_ptx
from mlc_mlir.schedule.rules.gpu_mma import schedule_matmul_mma
from mlc_mlir.target import Target
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    f.output(ops.matmul(f.arg("a", shape=(M, K), dtype="float16"), f.arg("b", shape=(K, N), dtype="float16")))
sch = mlc.Schedule(bb.finish())
schedule_matmul_mma(sch, sch.get_block("matmul"), Target("cuda", cpu="generic", arch="sm_90").cuda_arch,
                    forced=FORCED)
try:
    compile_to_ptx(sch.mod)
    print("compiled")
except mlc.MlcError as e:
    print("refused", type(e).__name__)
"""


@pytest.mark.parametrize("shape,forced,expect", [
    # one warp: the A and B copies stay apart (a barrier before B's copies), which
    # pipeline_shared_memory_copies asserts on: the loop stays unpipelined
    ((256, 256, 256), {"wy": 1, "wx": 1, "wm": 16, "wn": 128, "kt": 16, "stages": 2}, "compiled"),
    # 2 k steps for 3 stages: the pipeliner's preconditions fail: unpipelined
    ((128, 64, 512), {"wy": 1, "wx": 2, "wm": 64, "wn": 64, "kt": 32, "stages": 3}, "compiled"),
    # 128 does not divide into 4 x 64: partial tiles have dynamic bounds, a PipelineError
    ((192, 96, 320), {"wy": 2, "wx": 4, "wm": 64, "wn": 64, "kt": 16, "stages": 2}, "refused"),
])
def test_sampled_mma_decisions_compile_or_fail_cleanly(shape, forced, expect):
    """A sampled point either compiles or raises an MlcError (a failed candidate), in a child
    process: MLIR asserts abort the process."""
    m, k, n = shape
    code = _CHILD.replace("M, K", f"{m}, {k}").replace("K, N", f"{k}, {n}").replace(
        "FORCED", repr(dict(forced, staged=1)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == expect, proc.stdout
