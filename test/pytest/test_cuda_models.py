"""Imported networks on the CUDA target: a small residual CNN (padded convolutions, batch norm,
max pooling, a residual add, global average pooling, a linear head) and a matmul whose operand is
transposed in the same function. Lowering to cubins (ptxas) runs in CI; numerics against
PyTorch need a GPU (skipped without one)."""

import importlib
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402
from mlc_mlir.pipeline.cuda_compile import lower_cuda  # noqa: E402
from mlc_mlir.pipeline.options import CompileOptions  # noqa: E402
from mlc_mlir.runtime.cuda import cuda_available  # noqa: E402
from mlc_mlir.target import Target  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES


class ResidualNet(torch.nn.Module):
    """ResNet's stem and one basic block, at 32 output channels (F a multiple of the CPU's
    vector lanes, which once sent the convolutions to the CPU-only NHWC rewrite)."""

    def __init__(self):
        super().__init__()
        c = 32
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(3, stride=2, padding=1))
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.head = torch.nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.conv2(torch.relu(self.conv1(x))))
        return self.head(x.mean((2, 3)))


def _net():
    torch.manual_seed(0)
    net = ResidualNet().eval()
    with torch.no_grad():
        bn = net.stem[1]
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 20, 20)
    return net, x


def _transposed_matmul():
    """``x @ w^T`` with ``w`` an argument: the transpose is computed in the matmul's function."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", shape=(64, 96)), f.arg("w", shape=(128, 96))
        f.output(ops.matmul(x, ops.transpose(w, (1, 0))))
    return bb.finish()


@needs_ptxas
def test_residual_cnn_lowers_to_cubins():
    net, x = _net()
    mod = mlc.from_torch(net, (x,)).bind_params()
    _, lowered = lower_cuda(mod, CompileOptions(target=Target.cuda()), CPU_STAGES)
    text = str(lowered.ir_module)
    assert text.count("gpu.binary") >= 5


@needs_ptxas
def test_matmul_on_a_transposed_operand_lowers():
    _, lowered = lower_cuda(_transposed_matmul(), CompileOptions(target=Target.cuda()), CPU_STAGES)
    assert "gpu.binary" in str(lowered.ir_module)


def _attention_with_constant_weights():
    """softmax(x W (x W)^T) x W with a constant W: the CPU layout steps fuse the attention into
    one CPU kernel and pack W into mmt4d panels; neither may reach a CUDA compile."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 64, 128))
        w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
        q = ops.reshape(ops.matmul(ops.reshape(x, (128, 128)), w), (2, 64, 128))
        s = ops.softmax(ops.batch_matmul(q, ops.transpose(q, (0, 2, 1))), axis=-1)
        f.output(ops.batch_matmul(s, q))
    return bb.finish()


@needs_ptxas
def test_cpu_layout_steps_stay_out_of_cuda_compiles():
    _, lowered = lower_cuda(_attention_with_constant_weights(), CompileOptions(target=Target.cuda()),
                            CPU_STAGES)
    text = str(lowered.ir_module)
    assert "gpu.binary" in text and "mmt4d" not in text


@needs_gpu
def test_residual_cnn_matches_torch_on_the_gpu():
    net, x = _net()
    exe = mlc.compile(mlc.from_torch(net, (x,)).bind_params(), target="cuda")
    with torch.no_grad():
        want = net(x).numpy()
    got = exe(x.numpy())
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())


@needs_gpu
def test_matmul_on_a_transposed_operand_matches_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 96), np.float32), rng.standard_normal((128, 96), np.float32)
    got = mlc.compile(_transposed_matmul(), target="cuda")(x, w)
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-4)
