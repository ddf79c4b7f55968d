"""The GPU's register-tiled direct convolution (:mod:`mlc_mlir.schedule.rules.gpu_conv`): in
the PTX of ResNet-18's layers the FMA loop reads shared memory only, each load feeding several
FMAs, the input window and the weights copied straight from global to shared memory,
``ptxas -v`` clean without spills; the staged panels' shapes (:mod:`mlc_mlir.schedule.
operand_tiles`); on a GPU (skipped without one) the results match PyTorch's conv2d in float64
for strides, paddings, 1x1, 7x7, batches and odd sizes."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.pipeline.cuda import compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import fma_loop, ptxas_usage
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.schedule.operand_tiles import spread_threads, tile_shape
from mlc_mlir.schedule.rules.gpu_conv import (TILE_NAMES, conv2d_tile_defaults, conv2d_tiles_fit,
                                              conv_dims, schedule_conv2d_tiles, shared_bytes)
from mlc_mlir.schedule.rules.gpu_common import default_threads
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def conv_net(n, c, f, h, w, k, stride, pad):
    bb = mlc.GraphBuilder()
    with bb.function("main") as fn:
        x, wt = fn.arg("x", shape=(n, c, h, w)), fn.arg("w", shape=(f, c, k, k))
        fn.output(ops.conv2d(x, wt, strides=(stride, stride), padding=(pad, pad)))
    return bb.finish()


def conv_kernel(mod):
    ptx = compile_to_ptx(default_schedule(mod, CUDA))
    (conv,) = [t for t in ptx.values() if "fma.rn.f32" in t]
    return conv


#: ResNet-18's conv layers at batch 1: (c, f, h, k, stride, pad)
RESNET = [(3, 64, 224, 7, 2, 3), (64, 64, 56, 3, 1, 1), (64, 128, 56, 3, 2, 1), (64, 128, 56, 1, 2, 0),
          (128, 128, 28, 3, 1, 1), (256, 256, 14, 3, 1, 1), (512, 512, 7, 3, 1, 1)]


@needs_ptxas
def test_resnet_3x3_layer_reads_shared_memory_in_its_fma_loop():
    conv = conv_kernel(conv_net(1, 64, 64, 56, 56, 3, 1, 1))
    loop = fma_loop(conv)
    # a register tile: each value loaded from shared memory feeds several FMAs (the reduction
    # rule loads an input and a weight from global memory per FMA)
    assert loop.global_loads == 0 and 0 < loop.shared_loads and loop.loads_per_fma() <= 0.5
    # the staged copies go straight from global to shared memory (no device malloc, no stack)
    assert "malloc" not in conv and ".local" not in conv
    use = ptxas_usage(conv)
    assert use.spill_stores == 0 and use.shared_bytes > 0


@needs_ptxas
@pytest.mark.parametrize("layer", RESNET, ids=lambda s: "c{}f{}h{}k{}s{}p{}".format(*s))
def test_resnet_layers_are_tiled_and_ptxas_clean(layer):
    c, f, h, k, s, p = layer
    conv = conv_kernel(conv_net(1, c, f, h, h, k, s, p))
    assert fma_loop(conv).shared_loads > 0 and "malloc" not in conv
    assert ptxas_usage(conv).spill_stores == 0


def test_default_tiles_fit_the_architecture():
    arch = CUDA.cuda_arch
    for c, f, h, k, s, p in RESNET:
        sch = mlc.Schedule(conv_net(1, c, f, h, h, k, s, p))
        d, terms = conv_dims(sch, sch.get_block("conv2d"))
        t = conv2d_tile_defaults(d, terms, arch, default_threads(arch))
        assert conv2d_tiles_fit(t, d, terms, arch), ((c, f, h, k, s, p), t)
        assert d["f"] % (t["tf"] * t["lf"]) == 0 and d["oh"] % (t["th"] * t["lh"]) == 0
        assert shared_bytes(t, d, terms) <= arch.static_shared_bytes_per_block // 2


def test_staged_window_shape():
    # input (n, c, oh*2 + kh, ow*2 + kw) over 4 rows, 8 columns, 3x3 taps, 16 channels
    terms = (((0, 1),), ((4, 1),), ((2, 2), (5, 1)), ((3, 2), (6, 1)))
    assert tile_shape(terms, [1, 8, 4, 8, 16, 3, 3]) == [1, 16, 9, 17]
    assert tile_shape((None,), [1]) is None
    # threads along the contiguous dim first, each a divisor of its extent
    assert spread_threads([1, 16, 9, 17], 256) == [1, 1, 9, 17]
    assert spread_threads([64, 8, 3, 3], 256) == [2, 8, 3, 3]


#: (n, c, f, h, w, k, stride, pad): strides, paddings, 1x1, 7x7, a batch, odd sizes, and two
#: ResNet-18 layers whose default tiles hold several accumulators a thread
CASES = [(1, 16, 32, 14, 14, 3, 1, 1), (1, 8, 16, 15, 15, 3, 2, 1), (2, 5, 12, 13, 11, 3, 1, 0),
         (1, 16, 32, 14, 14, 1, 2, 0), (1, 3, 16, 32, 32, 7, 2, 3), (1, 32, 64, 7, 7, 3, 1, 1),
         (1, 64, 64, 56, 56, 3, 1, 1), (1, 64, 128, 56, 56, 3, 2, 1)]

#: (case, tiles tf, th, tw, lf, lh, lw, kt): register tiles over all three output dims
FORCED = [((1, 8, 16, 15, 15, 3, 2, 1), (4, 4, 4, 2, 2, 2, 4)),
          ((2, 6, 12, 10, 12, 3, 1, 1), (2, 5, 4, 3, 2, 3, 3)),
          ((1, 16, 32, 14, 14, 1, 1, 0), (8, 7, 2, 4, 1, 7, 16))]


def _forced(case, tiles):
    sch = mlc.Schedule(conv_net(*case))
    schedule_conv2d_tiles(sch, sch.get_block("conv2d"), dict(zip(TILE_NAMES, tiles)))
    return sch


def _check(case, run):
    """``run(x, w)`` against PyTorch's conv2d in float64 on random data of ``case``."""
    torch = pytest.importorskip("torch")
    n, c, f, h, w, k, s, p = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), np.float32)
    wt = rng.standard_normal((f, c, k, k), np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(),
                                     stride=s, padding=p).numpy()
    np.testing.assert_allclose(run(x, wt), ref, rtol=1e-4, atol=1e-4 * np.sqrt(c * k * k))


def _run(mod, case):
    _check(case, mlc.compile(mod, target="cuda"))


def run_on_cpu(mod, *args):
    """Run a GPU-scheduled tensor module on the CPU: its ``scf.forall`` loops without their GPU
    mapping, its workgroup buffers in plain memory (text edits of the printed IR, test-only).
    Checks the schedule's tiling: the slices, the staged windows and weights, the register
    tiles (not the barriers or the thread mapping)."""
    text = re.sub(r", #gpu\.address_space<workgroup>", "", str(mod))
    text = re.sub(r"\{mapping = \[[^\]]*\]\}", "", text)
    assert "scf.forall" in text and "nofold" in text
    return mlc.compile(Module.parse(text), target="cpu", schedule="none", threads=1)(*args)


@pytest.mark.parametrize("case,tiles", [(CASES[1], None), (CASES[2], None), (CASES[4], None)] + FORCED)
def test_gpu_conv_schedule_computes_the_conv_on_the_cpu(case, tiles):
    mod = default_schedule(conv_net(*case), CUDA) if tiles is None else _forced(case, tiles).mod
    _check(case, lambda x, w: run_on_cpu(mod, x, w))


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda s: "n{}c{}f{}h{}w{}k{}s{}p{}".format(*s))
def test_cuda_tiled_conv_matches_torch(case):
    _run(conv_net(*case), case)


@needs_ptxas
@pytest.mark.parametrize("case,tiles", FORCED)
def test_forced_register_tiles_are_ptxas_clean(case, tiles):
    conv = next(t for t in compile_to_ptx(_forced(case, tiles).mod).values() if "fma.rn.f32" in t)
    assert ptxas_usage(conv).spill_stores == 0


@needs_gpu
@pytest.mark.parametrize("case,tiles", FORCED)
def test_cuda_forced_register_tiles_match_torch(case, tiles):
    _run(_forced(case, tiles).mod, case)


@needs_ptxas
def test_sampled_conv_schedules_compile_or_fail_cleanly():
    """The tuner's samples of the conv rule (the strategy, perfect tiles of f/oh/ow, kt): each
    lowers to ptxas-clean PTX or fails with an MlcError (a failed candidate), and some samples
    take the tiled conv."""
    from mlc_mlir.errors import MlcError
    from mlc_mlir.pipeline.cuda import check_ptx
    from mlc_mlir.tune.space_rules import default_space
    mod = conv_net(1, 32, 64, 28, 28, 3, 2, 1)
    tiled = 0
    for seed in range(8):
        sch = mlc.Schedule(mod, seed=seed, defaults=False)
        try:
            default_space(CUDA)(sch)
            texts = compile_to_ptx(sch.mod).values()
            for text in texts:
                check_ptx(text)   # e.g. a stage beyond 48 KiB of shared memory is refused
        except MlcError:
            continue
        tiled += any(".shared" in t for t in texts)
    assert tiled > 0
