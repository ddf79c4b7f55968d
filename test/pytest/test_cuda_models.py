"""Imported networks on the CUDA target: a small residual CNN (padded convolutions, batch norm,
max pooling, a residual add, global average pooling, a linear head), a matmul whose operand is
transposed in the same function, and the ResNet-18 and BERT that ``benchmarks/gpu_models.py``
runs on the GPU. Lowering to cubins (ptxas) runs in CI; numerics against PyTorch need a GPU
(skipped without one)."""

import importlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402
from mlc_mlir.ir.walk import find_ops, has_op  # noqa: E402
from mlc_mlir.pipeline.cuda_compile import lower_cuda  # noqa: E402
from mlc_mlir.pipeline.options import CompileOptions  # noqa: E402
from mlc_mlir.runtime.cuda import cuda_available  # noqa: E402
from mlc_mlir.target import Target, host_target  # noqa: E402

from cuda_hostsim import run_lowered  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES
BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


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


def _benchmark_model(name):
    """``(torch model, example args)`` of ``benchmarks/models_cpu.py``'s ``name``, the models
    ``benchmarks/gpu_models.py`` compiles for the GPU."""
    if name == "bert":
        pytest.importorskip("transformers")
    if BENCHMARKS not in sys.path:
        sys.path.insert(0, BENCHMARKS)
    return importlib.import_module("models_cpu").torch_model(name)


def _constant_weight_matmul():
    """A matmul on a constant B of a shape the CPU packs (``pack-weights``: ``linalg.mmt4d``)."""
    w = np.random.default_rng(0).standard_normal((96, 128)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("x", shape=(64, 96)), ops.constant(w)))
    return bb.finish(), w


def test_cuda_layout_stage_skips_the_cpu_only_rewrites():
    """The weight packing (and the other CPU-only layout steps) leave a CUDA compile's ops as
    they are: the GPU rules have no rule for ``linalg.mmt4d`` (BERT failed so on an H200)."""
    mod, _ = _constant_weight_matmul()
    stages = [s for s in CPU_STAGES if s.name in ("graph", "layout")]

    def layout(target):
        m = mod
        for stage in stages:
            m = stage(m, CompileOptions(target=target))
        return m

    assert has_op(layout(host_target()), "linalg.mmt4d")   # the CPU packs it
    cuda = layout(Target.cuda())
    assert not has_op(cuda, "linalg.mmt4d") and has_op(cuda, "linalg.matmul")


@needs_ptxas
@pytest.mark.parametrize("name", ["bert", "resnet18"])
def test_cuda_benchmark_models_lower_to_cubins(name):
    """The GPU benchmark's models through every stage to cubins, and BERT's host code on a
    simulated device (:mod:`cuda_hostsim`: no host access to device memory, copies in bounds)."""
    net, args = _benchmark_model(name)
    sigs, lowered = lower_cuda(mlc.from_torch(net, args), CompileOptions(target=Target.cuda()),
                               CPU_STAGES)
    assert len(find_ops(lowered, "gpu.binary")) >= (100 if name == "bert" else 50)
    if name == "bert":   # ResNet-18's 46 MB of constants make the simulated run slow
        res = run_lowered([(lowered, sigs)])[0]
        assert res["returncode"] == 0 and res["problems"] == [] and res["leaked"] == 0
        assert res["foreign"] == []


@needs_gpu
def test_cuda_matmul_on_constant_weights_matches_numpy():
    mod, w = _constant_weight_matmul()
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, target="cuda")(x), x @ w, rtol=1e-4, atol=1e-4)


@needs_gpu
def test_bert_matches_torch_on_the_gpu():
    net, args = _benchmark_model("bert")
    exe = mlc.compile(mlc.from_torch(net, args), target="cuda")
    with torch.no_grad():
        want = net(*args).numpy()
    got = exe(*[a.numpy() for a in args])
    assert np.abs(got - want).max() <= 1e-3 * max(1.0, np.abs(want).max())


@needs_gpu
def test_cuda_models_run_one_after_another_in_one_process():
    """A GPU run died with SIGSEGV at the start of the transposed matmul's compile, in a
    process that had run the residual CNN (and, in an earlier session, in BERT's after
    ResNet-18): the same sequence in a fresh process, with freed heap memory perturbed
    (``MALLOC_PERTURB_``: a use after free shows at once), a garbage collection between the
    models, and the fault handler's traceback on a crash."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys, gc; sys.path.insert(0, {here!r})\n"
            "import numpy as np, torch, mlc_mlir as mlc\n"
            "from test_cuda_models import _net, _transposed_matmul\n"
            "net, x = _net()\n"
            "exe = mlc.compile(mlc.from_torch(net, (x,)).bind_params(), target='cuda')\n"
            "got = exe(x.numpy())\n"
            "with torch.no_grad():\n"
            "    assert np.abs(got - net(x).numpy()).max() <= 1e-3\n"
            "del exe; gc.collect()\n"
            "rng = np.random.default_rng(0)\n"
            "a, w = rng.standard_normal((64, 96), np.float32), rng.standard_normal((128, 96), np.float32)\n"
            "y = mlc.compile(_transposed_matmul(), target='cuda')(a, w)\n"
            "assert np.abs(y - a @ w.T).max() <= 1e-3\n")
    env = dict(os.environ, MALLOC_PERTURB_="165", PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "failed with" not in proc.stderr, proc.stderr[-6000:]
