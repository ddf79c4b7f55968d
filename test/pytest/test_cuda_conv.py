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
from mlc_mlir.ir.walk import find_ops, function_body_ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx, lower_to_gpu
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.schedule.rules import gpu_rules
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
    # conv + relu, and with padding one pad kernel before them (a fill and a copy kernel
    # before the pad became a generic)
    assert len(ptx) == (3 if pad else 2)
    if pad:
        # the pad kernel: one clamped load, the zero selected outside the source, one store
        (pads,) = [t for t in ptx.values() if "fma.rn" not in t and "max.f32" not in t and "selp" in t]
        assert len(re.findall(r"ld\.global", pads)) == 1 and len(re.findall(r"st\.global", pads)) == 1
        assert re.search(r"selp\.f32\s+%r\d+, %r\d+, 0f00000000", pads)


@needs_ptxas
def test_conv_reduction_rule_accumulates_in_registers(monkeypatch):
    # the conv rule's other decision: one output per thread, the window from global memory
    monkeypatch.setitem(gpu_rules.GPU_RULES, "conv2d", gpu_rules.schedule_reduction)
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
    # pad, conv, relu in order in main and in main__device (the kernels function inlined into
    # both, one cubin per kernel); nothing copied from the host for them
    assert len(launches) == 6 and len({str(op.attributes["kernel"]) for op in launches}) == 3
    assert host.count("@mgpuMemcpy") == 3   # x and w in, the result out (in main only)


@needs_ptxas
def test_max_pool_with_padding_is_ptxas_clean():
    ptx = compile_to_ptx(default_schedule(pool_net(), CUDA))
    assert len(ptx) == 2
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


def _conv_bn_relu():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(16)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), bn, torch.nn.ReLU()).eval()
    x = torch.randn(1, 8, 12, 12)
    return net, x


@needs_ptxas
def test_batch_norm_is_folded_and_merged_with_relu():
    from mlc_mlir.pipeline.compile import CPU_STAGES, CompileOptions
    from mlc_mlir.pipeline.cuda_compile import lower_cuda
    net, x = _conv_bn_relu()
    _, lowered = lower_cuda(mlc.from_torch(net, (x,)), CompileOptions(target=Target.cuda()), CPU_STAGES)
    with lowered.context:
        kernels = [str(op.attributes["kernel"]) for op in find_ops(lowered, "gpu.launch_func")]
    # the pad, the conv, batch norm and relu in one kernel: no kernel computes the scale
    # (gamma / sqrt(var + eps)) or the shift from the weights on each call (7 kernels before:
    # the pad's fill and copy, the conv, scale, shift, batch norm, relu); each is launched from
    # both entries (numpy and device), one cubin each
    assert len(set(kernels)) == 3 and len(kernels) == 6, kernels


@needs_gpu
def test_cuda_conv_bn_relu_with_folded_weights_matches_torch():
    torch = pytest.importorskip("torch")
    net, x = _conv_bn_relu()
    got = mlc.compile(mlc.from_torch(net, (x,)), target="cuda")(x.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, net(x).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make,ref", [
    (lambda: conv_net(2, 2), lambda x, w: _conv_ref(x, w, 2, 2)),
    (pool_net, lambda x: np.max([np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
                                 [:, :, i:i + 12:2, j:j + 12:2] for i in range(3) for j in range(3)], axis=0))])
def test_pads_as_generics_compute_the_pad_on_the_cpu(make, ref):
    from mlc_mlir.pipeline.cuda_pads import pad_as_generic
    mod = make().clone()
    with mod.context:
        pads = find_ops(mod, "tensor.pad")
        assert pads
        for op in pads:
            pad_as_generic(op)
        assert not find_ops(mod, "tensor.pad")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(a.shape), np.float32) for a in mod.signature("main").args]
    np.testing.assert_allclose(mlc.compile(mod, target="cpu", schedule="none")(*args), ref(*args),
                               rtol=1e-5, atol=1e-5)


def test_folded_and_merged_graph_matches_torch_on_the_cpu():
    # the graph the CUDA compile schedules (constants folded, elementwise chains merged),
    # compiled for the CPU: the graph rewrites alone against PyTorch
    from mlc_mlir.graph.fold_constant import FoldConstant
    from mlc_mlir.pipeline.cuda_compile import FOLDED_ON_CUDA, merge_elementwise_chains
    torch = pytest.importorskip("torch")
    net, x = _conv_bn_relu()
    graph = merge_elementwise_chains(FoldConstant(only=FOLDED_ON_CUDA)(mlc.from_torch(net, (x,))))
    with graph.context:
        names = [str(op.name) for op in find_ops(graph, "linalg.generic")]
    assert len(names) == 1   # batch norm and relu, one op
    with torch.no_grad():
        np.testing.assert_allclose(mlc.compile(graph, target="cpu")(x.numpy()), net(x).numpy(),
                                   rtol=1e-4, atol=1e-4)


def test_merged_graph_keeps_every_op_named():
    # the inliner's default canonicalization composed consecutive transposes (BERT's attention
    # heads: a permute, then k transposed) into an unnamed op, which no GPU rule then scheduled
    # ("would run on the host")
    from mlc_mlir.pipeline.cuda_compile import merge_elementwise_chains
    torch = pytest.importorskip("torch")

    class Scores(torch.nn.Module):
        def forward(self, q, k):
            k = k.reshape(2, 8, 4, 4).permute(0, 2, 1, 3)
            return torch.relu(q @ k.transpose(-1, -2))

    net = Scores()
    q, k = torch.randn(2, 4, 8, 4), torch.randn(2, 8, 16)
    graph = merge_elementwise_chains(mlc.from_torch(net, (q, k)))
    with graph.context:
        ops_ = [op for op in function_body_ops(graph) if op.name.startswith("linalg.")]
    assert ops_ and all("mlc.name" in op.attributes for op in ops_)
    with torch.no_grad():
        np.testing.assert_allclose(mlc.compile(graph, target="cpu")(q.numpy(), k.numpy()),
                                   net(q, k).numpy(), rtol=1e-5, atol=1e-5)
