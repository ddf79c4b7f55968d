"""Imported networks on the CUDA target: a small residual CNN (padded convolutions, batch norm,
max pooling, a residual add, global average pooling, a linear head), a matmul whose operand is
transposed in the same function, and the ResNet-18 and BERT that ``benchmarks/gpu_models.py``
runs on the GPU. Lowering to cubins (ptxas) and the host code's calls per inference (on a
recording stand-in for the CUDA runtime, :mod:`fake_cuda`) run in CI; numerics against PyTorch
need a GPU (skipped without one)."""

import gc
import importlib
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402
from mlc_mlir.ir.walk import find_ops, has_op  # noqa: E402
from mlc_mlir.pipeline.cuda_compile import lower_cuda  # noqa: E402
from mlc_mlir.pipeline.options import CompileOptions  # noqa: E402
from mlc_mlir.runtime.cuda import cuda_available  # noqa: E402
from mlc_mlir.runtime.executable import engine_invoker  # noqa: E402
from mlc_mlir.runtime.memref import PackedArgs  # noqa: E402
from mlc_mlir.target import Target, host_target  # noqa: E402
from mlc_mlir.runtime import DeviceArray  # noqa: E402

from cuda_hostsim import run_lowered  # noqa: E402
from fake_cuda import FakeCuda  # noqa: E402

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


@pytest.fixture(scope="module")
def residual_lowered():
    """The residual CNN lowered for CUDA once for the module's two checks of it (the first
    reads its text before the second JITs it)."""
    net, x = _net()
    return x, lower_cuda(mlc.from_torch(net, (x,)).bind_params(),
                         CompileOptions(target=Target.cuda()), CPU_STAGES)[1]


@needs_ptxas
def test_residual_cnn_lowers_to_cubins(residual_lowered):
    text = str(residual_lowered[1].ir_module)
    assert text.count("gpu.binary") >= 5


@needs_ptxas
def test_residual_cnn_inference_is_one_stream_without_copies_of_weights(residual_lowered):
    """Per inference of the conv net: one stream, one wait, no allocation, no copy of a weight
    (all uploaded once at load time); before, each of its ~25 kernels and ~30 buffers had its
    own stream (81 per inference) and each weight was copied to the GPU on every call."""
    x, lowered = residual_lowered
    fake = FakeCuda(lowered)
    engine = fake.load(Target.cuda())
    weights = [a for n, a in fake.calls if n == "mgpuMemcpy"]
    with lowered.context:   # every constant the kernels read, uploaded once
        constants = [g for g in find_ops(lowered, "llvm.mlir.global")
                     if str(g.attributes["sym_name"]).strip('"').startswith("__constant")]
        kernels = {str(op.attributes["kernel"]) for op in find_ops(lowered, "gpu.launch_func")}
    assert len(weights) == len(constants) >= 5 and fake.count("mgpuMemAlloc") == 3   # weights, two slabs
    resident = set(fake.buffers)
    for name, copies in (("main__device", 0), ("main", 2), ("main__device", 0)):
        fake.reset()
        ys = [x.numpy(), np.empty((2, 10), np.float32)]
        packed = PackedArgs([a.shape for a in ys])
        packed.bind(ys)
        engine_invoker(engine, name)(packed)
        assert not fake.errors, fake.errors
        assert fake.count("mgpuLaunchKernel") == len(kernels) >= 10 and len(fake.streams) == 1
        assert {s for s, _ in fake.launches} == set(fake.streams)
        assert (fake.count("mgpuStreamSynchronize"), fake.count("mgpuMemAlloc"),
                fake.count("mgpuMemFree"), fake.count("mgpuMemcpy")) == (1, 0, 0, copies)
        # the kernels read the resident weights and write buffers in the slabs
        used = {fake.owner(v) for _, values in fake.launches for v in values} - {None}
        assert fake.owner(weights[0][0]) in used and used <= resident
    del engine
    gc.collect()
    assert not fake.buffers


class _Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _attention():
    g = torch.Generator().manual_seed(0)
    args = tuple(torch.randn(1, 2, 16, 32, generator=g) for _ in range(3))
    return mlc.from_torch(_Attention(), args), args


@needs_ptxas
def test_attention_lowers_for_cuda_without_the_cpu_fused_kernel():
    """The CPU layout fuses attention into a CPU kernel (vector registers, threads over rows);
    for CUDA the batch matmuls and the softmax get the GPU schedules."""
    _, lowered = lower_cuda(_attention()[0], CompileOptions(target=Target.cuda()), CPU_STAGES)
    assert "gpu.binary" in str(lowered.ir_module)


@needs_gpu
def test_attention_matches_torch_cuda():
    mod, args = _attention()
    with torch.no_grad():
        want = _Attention()(*args).numpy()
    got = mlc.compile(mod, target="cuda")(*[a.numpy() for a in args])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_ptxas
def test_matmul_on_a_transposed_operand_lowers():
    _, lowered = lower_cuda(_transposed_matmul(), CompileOptions(target=Target.cuda()), CPU_STAGES)
    assert "gpu.binary" in str(lowered.ir_module)


@needs_gpu
def test_residual_cnn_matches_torch_on_the_gpu():
    net, x = _net()
    exe = mlc.compile(mlc.from_torch(net, (x,)).bind_params(), target="cuda")
    with torch.no_grad():
        want = net(x).numpy()
    got = exe(x.numpy())
    _close(got, want)


def _close(got, want):
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())


@needs_gpu
def test_residual_cnn_matches_torch_on_the_gpu_over_calls_cuda(tmp_path):
    """JIT and AOT, numpy and device calls, each twice on new inputs: the weights stay on the
    GPU between calls and the buffers are reused."""
    net, _ = _net()
    exe = mlc.compile(mlc.from_torch(net, (torch.randn(2, 3, 20, 20),)).bind_params(),
                      target="cuda")
    lib = mlc.runtime.load_library(exe.export_library(str(tmp_path / "net.so")))
    for seed in range(2):
        x = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = net(x).numpy()
        for e in (exe, lib):
            _close(e(x.numpy()), want)
            _close(e.on_device(DeviceArray.from_numpy(x.numpy())).numpy(), want)


_MANY = """
import gc, numpy as np, torch, mlc_mlir as mlc
from mlc_mlir import ops
torch.manual_seed(0)
def linear(n):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.add(ops.matmul(f.arg("x", shape=(4, n)), ops.constant(
            np.full((n, 8), 0.5, np.float32))), ops.constant(np.arange(8, dtype=np.float32)))))
    return bb.finish()
live = []
for round_ in range(2):
    for n in (16, 32, 48):
        exe = mlc.compile(linear(n), target="cuda")
        x = np.random.default_rng(n).standard_normal((4, n)).astype(np.float32)
        want = np.maximum(x @ np.full((n, 8), 0.5, np.float32) + np.arange(8), 0)
        for _ in range(2):
            np.testing.assert_allclose(exe(x), want, rtol=1e-5, atol=1e-5)
        if n == 32:
            live.append(exe)   # some stay alive while others are dropped
        del exe
        gc.collect()
    dev = torch.randn(4, 16, device="cuda")   # torch shares the primary context
    y = live[-1](np.ones((4, 32), np.float32))
del live
gc.collect()
print("ok")
"""


@needs_gpu
def test_many_cuda_executables_compiled_run_and_dropped_in_one_process():
    """Compile, run and drop several CUDA executables (and keep some) in one process: the
    engines' destructors free their resident memory and unload their modules while the others
    keep running. A child process, so a crash is a failure, not a dead worker."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_MANY)], capture_output=True,
                          text=True, env=dict(os.environ), timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
    assert "failed with" not in proc.stderr, proc.stderr[-3000:]   # a CUresult the runtime printed


@needs_gpu
def test_matmul_on_a_transposed_operand_matches_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 96), np.float32), rng.standard_normal((128, 96), np.float32)
    got = mlc.compile(_transposed_matmul(), target="cuda")(x, w)
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-4)


def _benchmark_model(name, **sizes):
    """``(torch model, example args)`` of ``benchmarks/models_cpu.py``'s ``name``, the models
    ``benchmarks/gpu_models.py`` compiles for the GPU; ``sizes`` go to its builder."""
    if name == "bert":
        pytest.importorskip("transformers")
    if BENCHMARKS not in sys.path:
        sys.path.insert(0, BENCHMARKS)
    return importlib.import_module("models_cpu").torch_model(name, **sizes)


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
    simulated device (:mod:`cuda_hostsim`: no host access to device memory, copies in bounds).
    BERT at one layer and a 512-token vocabulary: every op kind of the benchmark's two layers
    (the layers are alike), half the kernels, 1/60 of the embedding table the simulated run
    copies (the full size ran 130 s in CI)."""
    net, args = _benchmark_model(name, **({"layers": 1, "vocab": 512} if name == "bert" else {}))
    sigs, lowered = lower_cuda(mlc.from_torch(net, args), CompileOptions(target=Target.cuda()),
                               CPU_STAGES)
    assert len(find_ops(lowered, "gpu.binary")) >= 50
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


@needs_gpu
def test_compile_after_a_cuda_model_and_torch_on_the_gpu():
    """The sequence of ``benchmarks/gpu_models.py`` that died with SIGSEGV on an H200 (Ubuntu
    24.04, libgcc 14.2): ResNet-18 compiled for CUDA, run on numpy and device arrays and timed,
    the same network run by PyTorch on the GPU, the executable dropped; then the next compile
    (the MLIR bindings' op iteration threw its ``StopIteration`` into a stale unwinder entry
    of the dropped engine: :mod:`mlc_mlir.pipeline.cuda_modules`). A child process with the
    fault handler, so a crash is this test's failure and its traceback."""
    code = (f"import sys, gc; sys.path.insert(0, {BENCHMARKS!r})\n"
            "import numpy as np, torch, mlc_mlir as mlc\n"
            "from mlc_mlir import ops\n"
            "from mlc_mlir.runtime import DeviceArray\n"
            "import models_cpu\n"
            "net, args = models_cpu.torch_model('resnet18')\n"
            "exe = mlc.compile(mlc.from_torch(net, args), target='cuda')\n"
            "xs = [t.numpy() for t in args]\n"
            "got = exe(*xs)\n"
            "exe.on_device(*[DeviceArray.from_numpy(x) for x in xs])\n"
            "exe.benchmark(*xs, number=5, repeat=3, device=True)\n"
            "with torch.no_grad():\n"
            "    want = net.cuda()(*[t.cuda() for t in args]).cpu().numpy()\n"
            "assert np.abs(got - want).max() <= 1e-3 * max(1.0, np.abs(want).max())\n"
            "del exe; gc.collect()\n"
            "bb = mlc.GraphBuilder()\n"
            "with bb.function('main') as f:\n"
            "    f.output(ops.softmax(f.arg('x', shape=(256, 512)), axis=-1))\n"
            "x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)\n"
            "y = mlc.compile(bb.finish(), target='cuda')(x)\n"
            "e = np.exp(x - x.max(-1, keepdims=True))\n"
            "assert np.abs(y - e / e.sum(-1, keepdims=True)).max() <= 1e-5\n")
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
