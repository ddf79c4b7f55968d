"""Convolution and pooling with padding on the GPU (:mod:`mlc_mlir.pipeline.cuda_pads`): the
``tensor.pad`` becomes a fill kernel and a copy kernel writing the padded input to device
memory before the conv kernel; the default GPU schedule covers conv2d and pooling; PTX is
ptxas-clean; on a GPU the results match numpy (skipped without one)."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx, lower_to_gpu
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def conv_net(pad=1, stride=1):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", shape=(2, 8, 12, 12)), f.arg("w", shape=(16, 8, 3, 3))
        f.output(ops.relu(ops.conv2d(x, w, strides=(stride, stride), padding=(pad, pad))))
    return bb.finish()


def pool_net():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.max_pool2d(f.arg("x", shape=(1, 8, 12, 12)), 3, strides=2, padding=(1, 1)))
    return bb.finish()


def _conv_ref(x, w, pad, stride):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = xp.shape
    f, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, f, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    return np.maximum(out, 0)


@needs_ptxas
@pytest.mark.parametrize("pad,stride", [(1, 1), (2, 2), (0, 1)])
def test_conv2d_with_padding_is_ptxas_clean(pad, stride):
    ptx = compile_to_ptx(default_schedule(conv_net(pad, stride), CUDA))
    for text in ptx.values():
        check_ptx(text)
    # conv + relu, and with padding a fill kernel and a copy kernel before them
    assert len(ptx) == (4 if pad else 2)
    if pad:
        # the fill kernel: stores zeros, loads nothing
        fills = [t for t in ptx.values() if "ld.global" not in t]
        assert len(fills) == 1 and re.search(r"st\.global\.b32\s+\[%rd\d+\], 0;", fills[0])


@needs_ptxas
def test_conv_accumulates_in_registers():
    ptx = compile_to_ptx(default_schedule(conv_net(), CUDA))
    (conv,) = [t for t in ptx.values() if "fma.rn.f32" in t]
    # the 8x3x3 window is unrolled into 72 FMAs on registers; the sum is stored once
    assert conv.count("fma.rn.f32") == 72 and ".local" not in conv
    assert len(re.findall(r"\bst\.global", conv)) == 1


@needs_ptxas
def test_padded_input_is_a_device_temporary():
    lowered = lower_to_gpu(default_schedule(conv_net(), CUDA), host_code=True)
    with lowered.context:
        launches = find_ops(lowered, "gpu.launch_func")
        host = [str(op.attributes["callee"]) for op in find_ops(lowered, "llvm.call")
                if "callee" in op.attributes]
    # fill, copy, conv, relu in order in main and in main__device (the kernels function inlined
    # into both, one cubin per kernel); nothing copied from the host for them
    assert len(launches) == 8 and len({str(op.attributes["kernel"]) for op in launches}) == 4
    assert host.count("@mgpuMemcpy") == 3   # x and w in, the result out (in main only)


@needs_ptxas
def test_max_pool_with_padding_is_ptxas_clean():
    ptx = compile_to_ptx(default_schedule(pool_net(), CUDA))
    assert len(ptx) == 3
    for text in ptx.values():
        check_ptx(text)


@needs_gpu
@pytest.mark.parametrize("pad,stride", [(1, 1), (2, 2)])
def test_conv2d_with_padding_matches_numpy(pad, stride):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 12, 12), np.float32)
    w = rng.standard_normal((16, 8, 3, 3), np.float32)
    out = mlc.compile(conv_net(pad, stride), target="cuda")(x, w)
    np.testing.assert_allclose(out, _conv_ref(x, w, pad, stride), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_max_pool_with_padding_matches_numpy():
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12), np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.max([xp[:, :, i:i + 12:2, j:j + 12:2] for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_allclose(mlc.compile(pool_net(), target="cuda")(x), ref, rtol=1e-6)
