"""GPU design space for the tuner: the matmul's block/thread/register/k tiles as knobs; sampled
candidates lower to ptxas-clean PTX; traces replay; bad targets and tiles are clear errors."""

import dataclasses
import os
import random
import shutil
import subprocess
import sys

import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError, TuningError
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.target import Target
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.rules.gpu_rules import matmul_tile_defaults
from mlc_mlir.tune.gpu_space import MatmulTiles, matmul_tile_candidates, sample_gpu_matmul
from mlc_mlir.tune.space_rules import default_space

ARCH = Target.cuda().cuda_arch
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def _matmul(m=256, k=128, n=256):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))))
    return bb.finish()


def test_candidates_respect_cuda_limits():
    cands = list(matmul_tile_candidates(256, 256, 128, ARCH))
    assert MatmulTiles(16, 16, 4, 4, 8) in cands
    for t in cands:
        assert 32 <= t.threads() <= 1024 and t.shared_bytes() <= 48 * 1024
        assert 256 % (t.ty * t.ly) == 0 and 128 % t.kt == 0


@needs_ptxas
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_candidates_are_ptxas_clean(seed):
    t = random.Random(seed).choice(list(matmul_tile_candidates(256, 256, 128, ARCH)))
    sch = mlc.Schedule(_matmul())
    sample_gpu_matmul(sch, sch.get_block("matmul"), t, ARCH)
    texts = compile_to_ptx(sch.mod).values()
    for text in texts:
        check_ptx(text)
    assert any(".shared" in x and f".maxntid {t.threads()}, 1, 1" in x for x in texts)
    again = mlc.Schedule.from_trace(sch.payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(again.as_transform_script()) == str(sch.as_transform_script())


@needs_ptxas
@pytest.mark.parametrize("kt", [4, 16])
def test_wide_float32_panels_map_onto_few_threads(kt):
    """32 threads staging a 64-wide f32 B panel: 16-byte vectors per thread into shared memory
    (every f32 candidate of gpu_matmul.py had failed with 4-byte copies: 64 > 32 threads), and
    16-byte global loads (the kernel's buffers are llvm.align 16)."""
    t = MatmulTiles(4, 8, 8, 8, kt)
    sch = mlc.Schedule(_matmul())
    sample_gpu_matmul(sch, sch.get_block("matmul"), t, ARCH)
    texts = list(compile_to_ptx(sch.mod).values())
    for text in texts:
        check_ptx(text)
    assert any("st.shared.v4.b32" in x and "ld.global.v4.b32" in x for x in texts)


def test_space_samples_knobs():
    sch = mlc.Schedule(_matmul())
    default_space(Target.cuda())(sch)
    kinds = [i.kind for i in sch.trace.insts]
    assert kinds.count("sample_categorical") == 6 and "bind" in kinds and "annotate" in kinds


def test_default_schedule_is_the_rule_at_its_defaults():
    """One GPU matmul rule: the default schedule takes the shape-derived tiles as its decisions;
    the space is the same rule drawing them (replaying a sample with the default decisions
    gives the default schedule)."""
    mod = _matmul()
    dflt = mlc.Schedule(mod)
    apply_default_schedule(dflt, Target.cuda())
    d = matmul_tile_defaults(256, 256, 128, ARCH)
    cats = [i for i, inst in enumerate(dflt.trace.insts) if inst.kind == "sample_categorical"]
    values = [dflt.trace.insts[i].attrs["candidates"][dflt.trace.decisions[i]] for i in cats]
    assert values == [d["ty"], d["tx"], d["ly"], d["lx"], d["kt"], d["prefetch"]]
    samples = []
    for seed in range(4):
        sch = mlc.Schedule(mod, seed=seed, defaults=False)
        default_space(Target.cuda())(sch)
        samples.append([sch.trace.decisions[i] for i in cats])
    assert any(s != [dflt.trace.decisions[i] for i in cats] for s in samples)
    replayed = mlc.Schedule.from_trace(mod, sch.trace, decisions={i: dflt.trace.decisions[i] for i in cats})
    assert str(replayed.as_transform_script()) == str(dflt.as_transform_script())


@needs_ptxas
def test_sampled_threads_of_reductions_and_elementwise_ops_are_ptxas_clean():
    """The GPU reduction and elementwise rules sample their threads per block (up to 1024);
    samples of softmax (cooperative row reductions, elementwise exp/divide) lower to clean PTX."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.softmax(f.arg("x", shape=(64, 1024))))
    mod = bb.finish()
    threads = set()
    for seed in range(3):
        sch = mlc.Schedule(mod, seed=seed, defaults=False)
        default_space(Target.cuda())(sch)
        for text in compile_to_ptx(sch.mod).values():
            check_ptx(text)
        threads.add(tuple(sch.trace.decisions[i] for i, inst in enumerate(sch.trace.insts)
                          if inst.kind == "sample_categorical"))
    assert len(threads) > 1


def test_space_needs_a_cpu_or_cuda_target():
    with pytest.raises(TuningError, match="expected a cpu or cuda Target"):
        default_space("cuda")


def test_tile_outside_the_options_is_refused():
    sch = mlc.Schedule(_matmul())
    with pytest.raises(ScheduleError, match="decision"):
        sample_gpu_matmul(sch, sch.get_block("matmul"), MatmulTiles(64, 16, 4, 4, 8), ARCH)


@pytest.mark.skipif(cuda_available(), reason="a CUDA driver is present")
def test_benchmark_prints_a_skip_line_without_a_gpu():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "gpu_matmul.py")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0 and out.stdout.startswith("gpu_matmul: skipped: libcuda.so.1")


def test_architecture_resources_follow_the_compute_capability():
    """The CUDA C++ Programming Guide's per-capability table: shared memory per SM / opt-in per
    block in KiB, resident threads per SM; 48 KiB static per block everywhere."""
    expect = {"sm_75": (64, 64, 1024), "sm_80": (164, 163, 2048), "sm_86": (100, 99, 1536),
              "sm_90": (228, 227, 2048), "sm_90a": (228, 227, 2048), "sm_121": (100, 99, 1536)}
    for arch, (smem, optin, threads) in expect.items():
        a = Target("cuda", cpu="generic", arch=arch).cuda_arch
        assert (a.shared_bytes_per_sm, a.optin_shared_bytes_per_block, a.max_threads_per_sm) == \
            (smem * 1024, optin * 1024, threads)
        assert a.static_shared_bytes_per_block == 48 * 1024 and a.max_threads_per_block == 1024
    with pytest.raises(mlc.MlcError, match="sm_35"):
        Target("cuda", cpu="generic", arch="sm_35")
    with pytest.raises(mlc.MlcError, match="no CUDA architecture"):
        Target("cpu", cpu="generic").cuda_arch


def test_default_tiles_derive_from_the_registers():
    """256 threads = the most whose threads may each hold 255 registers of a 64 Ki file; an 8 x 8
    register tile = the 64 accumulators within half of those 255 registers; a matmul too small
    for two such blocks gets smaller register tiles."""
    from mlc_mlir.schedule.rules.gpu_common import default_threads, min_cooperative
    from mlc_mlir.schedule.rules.gpu_mma import mma_warps
    assert default_threads(ARCH) == max(t for t in (32, 64, 128, 256, 512, 1024) if t * 255 <= 65536)
    assert min_cooperative(ARCH) == 64 and mma_warps(ARCH) == (2, 4)
    assert matmul_tile_defaults(256, 256, 128, ARCH) == {"ty": 16, "tx": 16, "ly": 8, "lx": 8,
                                                          "kt": 8, "prefetch": 1}
    d = matmul_tile_defaults(128, 128, 128, ARCH)   # one 128 x 128 block: 4 x 4 tiles, 4 blocks
    assert (d["ty"], d["tx"], d["ly"], d["lx"]) == (16, 16, 4, 4)
    small = dataclasses.replace(ARCH, registers_per_sm=16384)   # 64 threads of 255 registers
    assert default_threads(small) == 64
    d = matmul_tile_defaults(256, 256, 128, small)
    assert (d["ty"], d["tx"], d["ly"], d["lx"]) == (8, 8, 8, 8)
    few = dataclasses.replace(ARCH, max_registers_per_thread=63)   # 16 accumulators
    assert (matmul_tile_defaults(256, 256, 128, few)["ly"], matmul_tile_defaults(256, 256, 128, few)["lx"]) == (4, 4)


def test_candidates_fit_the_architectures_shared_memory():
    small = dataclasses.replace(ARCH, static_shared_bytes_per_block=8 * 1024)
    full = list(matmul_tile_candidates(256, 256, 128, ARCH))
    fits = list(matmul_tile_candidates(256, 256, 128, small))
    assert fits and all(t.shared_bytes() <= 8 * 1024 for t in fits)
    assert set(fits) == {t for t in full if t.shared_bytes() <= 8 * 1024} and len(fits) < len(full)


def test_tensor_cores_only_from_sm80():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(128, 64), dtype="float16"),
                            f.arg("b", shape=(64, 128), dtype="float16")))
    mod = bb.finish()
    for arch, mma in (("sm_75", False), ("sm_80", True), ("sm_90", True)):
        sch = mlc.Schedule(mod)
        apply_default_schedule(sch, Target("cuda", cpu="generic", arch=arch))
        annotated = any(i.kind == "annotate" and "mlc.mma_sync" in i.inputs for i in sch.trace.insts)
        assert annotated == mma, arch
