"""Host code of a CUDA function (:mod:`mlc_mlir.pipeline.cuda_host`): ``main`` copies numpy
arguments into device buffers and results back (``gpu.memcpy`` -> ``mgpuMemcpy``, nothing
registered with ``mgpuMemHostRegister``); ``main__device`` runs the same kernels on arrays kept in
GPU memory (``Function.on_device``). Constants are uploaded once, when the code is loaded; each
function's buffers are one slab allocated then too; a call is one stream and one wait.

The host code runs here on the CPU against a recording stand-in for the CUDA runtime
(:mod:`fake_cuda`); numerics need a GPU (skipped without one)."""

import gc
import importlib
import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda_compile import lower_cuda
from mlc_mlir.pipeline.cuda_host import ALIGN, _first_fit
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.runtime import DeviceArray, as_device_array
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.runtime.executable import engine_invoker
from mlc_mlir.runtime.memref import PackedArgs
from mlc_mlir.target import Target

from fake_cuda import FakeCuda

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES


def mlp():
    """Two inputs, a weight, two kernels with a temporary between them, one result."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", shape=(128, 64)), f.arg("w", shape=(64, 256))
        f.output(ops.add(ops.relu(ops.matmul(x, w)), f.arg("b", shape=(128, 256))))
    return bb.finish()


def _with_constant():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("x", shape=(3, 40)),
                         ops.constant(np.arange(120, dtype=np.float32).reshape(3, 40))))
    return bb.finish()


def _call(engine, name, arrays):
    packed = PackedArgs([a.shape for a in arrays])
    packed.bind(arrays)
    engine_invoker(engine, name)(packed)


def _per_call(fake, engine, name, arrays):
    """Run ``name`` once on ``arrays`` (host memory: the fake device's memory is host memory);
    returns {mgpu function: calls}."""
    fake.reset()
    _call(engine, name, arrays)
    assert not fake.errors, fake.errors
    return {n: fake.count(n) for n in ("mgpuStreamCreate", "mgpuStreamSynchronize",
                                        "mgpuStreamDestroy", "mgpuMemAlloc", "mgpuMemFree",
                                        "mgpuMemcpy", "mgpuLaunchKernel")}


@needs_ptxas
def test_a_call_is_one_stream_one_wait_and_no_allocation():
    """Per call: one stream, every kernel launched on it, one synchronization; no
    ``cuMemAlloc``/``cuMemFree`` (the buffers are a slab allocated when the code is loaded);
    ``main`` copies three inputs in and one result out, ``main__device`` copies nothing. Before
    the slab and gpu-async-region, each launch and each buffer had a stream of its own."""
    _, lowered = lower_cuda(mlp(), CompileOptions(target=CUDA), CPU_STAGES)
    fake = FakeCuda(lowered)
    assert "mgpuMemHostRegister" not in fake.ll
    engine = fake.load(CUDA)
    loaded = fake.count("mgpuModuleLoad")
    slabs = set(fake.buffers)
    assert loaded >= 2 and fake.count("mgpuMemAlloc") == len(slabs) == 2   # main, main__device
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (64, 256), (128, 256))]
    for _ in range(2):   # the second call too: nothing is set up lazily
        dev = _per_call(fake, engine, "main__device", args + [np.empty((128, 256), np.float32)])
        assert dev["mgpuLaunchKernel"] >= 2
        assert dev == {"mgpuStreamCreate": 1, "mgpuStreamSynchronize": 1, "mgpuStreamDestroy": 1,
                       "mgpuMemAlloc": 0, "mgpuMemFree": 0, "mgpuMemcpy": 0,
                       "mgpuLaunchKernel": dev["mgpuLaunchKernel"]}
        assert {s for s, _ in fake.launches} == set(fake.streams)   # all on the call's stream
        # the temporary between the kernels is in a slab made at load time
        temps = {fake.owner(v) for _, values in fake.launches for v in values} - {None}
        assert temps and temps <= slabs
        host = _per_call(fake, engine, "main", args + [np.empty((128, 256), np.float32)])
        assert host == dict(dev, mgpuMemcpy=4)
        pointers = {a.ctypes.data for a in args}
        assert not pointers & {v for _, values in fake.launches for v in values}
    del engine   # the destructors free the slabs and unload every module
    gc.collect()
    assert not fake.buffers and fake.count("mgpuModuleUnload") == loaded
    assert not fake.errors, fake.errors


@needs_ptxas
def test_constants_are_uploaded_once_when_the_code_is_loaded():
    """A weight (``memref.get_global``, host memory, which a kernel cannot read) is copied into
    device memory by the load function; the calls hand the kernels that copy and copy no
    weights themselves (before: one ``cuMemAlloc`` + copy + ``cuMemFree`` per constant per
    call)."""
    _, lowered = lower_cuda(_with_constant(), CompileOptions(target=CUDA), CPU_STAGES)
    fake = FakeCuda(lowered)
    engine = fake.load(CUDA)
    copies = [a for n, a in fake.calls if n == "mgpuMemcpy"]
    assert len(copies) == 1 and copies[0][2] == 480
    weights = fake.owner(copies[0][0])
    got = np.frombuffer(fake.buffers[weights][copies[0][0] - weights:][:480].tobytes(), np.float32)
    np.testing.assert_array_equal(got, np.arange(120, dtype=np.float32))
    x = np.ones((3, 40), np.float32)
    for _ in range(2):
        calls = _per_call(fake, engine, "main__device", [x, np.empty_like(x)])
        assert calls["mgpuMemcpy"] == 0 and calls["mgpuMemAlloc"] == 0
        assert weights in {fake.owner(v) for _, values in fake.launches for v in values}
        assert _per_call(fake, engine, "main", [x, np.empty_like(x)])["mgpuMemcpy"] == 2
    del engine
    gc.collect()
    assert not fake.buffers and not fake.errors


@needs_ptxas
def test_a_busy_slab_gives_the_call_its_own():
    """Two threads in the same function: the second finds the slab taken and allocates one
    for its call (freed at its end); the first keeps the resident slab, given back after."""
    _, lowered = lower_cuda(mlp(), CompileOptions(target=CUDA), CPU_STAGES)
    fake = FakeCuda(lowered)
    engine = fake.load(CUDA)
    slabs = set(fake.buffers)
    inside, second_done = threading.Event(), threading.Event()
    first = threading.get_ident()

    def synchronize(stream):   # the first call waits here, holding the slab, for the second
        if threading.get_ident() == first:
            inside.set()
            assert second_done.wait(30)
    fake._StreamSynchronize = synchronize
    fake.reset()
    args = [np.ones(s, np.float32) for s in ((128, 64), (64, 256), (128, 256), (128, 256))]

    def second():   # enters while the first call holds the slab
        assert inside.wait(30)
        _call(engine, "main__device", [a.copy() for a in args])
        second_done.set()
    other = threading.Thread(target=second)
    other.start()
    _call(engine, "main__device", args)
    other.join()
    assert not fake.errors, fake.errors
    allocs = [a for n, a in fake.calls if n == "mgpuMemAlloc"]
    assert len(allocs) == 1 and fake.count("mgpuMemFree") == 1 and set(fake.buffers) == slabs
    fake._StreamSynchronize = lambda stream: None
    assert _per_call(fake, engine, "main__device", args)["mgpuMemAlloc"] == 0   # given back


def test_buffer_offsets_never_overlap_while_both_are_live():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 12)
        sizes = [ALIGN * rng.randint(1, 8) for _ in range(n)]
        starts = sorted(rng.randint(0, 30) for _ in range(n))
        ranges = [(s, s + rng.randint(0, 10)) for s in starts]
        offsets, total = _first_fit(sizes, ranges)
        for i in range(n):
            assert offsets[i] % ALIGN == 0 and offsets[i] + sizes[i] <= total
            for j in range(i):
                live = ranges[i][0] <= ranges[j][1] and ranges[j][0] <= ranges[i][1]
                apart = offsets[i] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[i]
                assert apart or not live, (sizes, ranges, offsets)
        assert total <= sum(sizes)
    # buffers used one after the other share their bytes
    assert _first_fit([512, 512, 512], [(0, 1), (2, 3), (4, 5)]) == ([0, 0, 0], 512)


def test_on_device_needs_a_cuda_function():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(4,))))
    exe = mlc.compile(bb.finish())
    with pytest.raises(mlc.ExecutionError, match="compiled for target='cuda'"):
        exe.on_device(np.ones(4, np.float32))
    with pytest.raises(mlc.ExecutionError, match="compiled for target='cuda'"):
        exe.benchmark(np.ones(4, np.float32), device=True)


def test_host_memory_is_not_a_device_array():
    with pytest.raises(mlc.ExecutionError, match="not in GPU memory.*__cuda_array_interface__"):
        as_device_array(np.ones(4, np.float32))


class _Strided:
    __cuda_array_interface__ = {"shape": (4, 4), "typestr": "<f4", "data": (1 << 20, False),
                                "version": 3, "strides": (4, 16)}


def test_non_contiguous_cuda_array_is_refused():
    with pytest.raises(mlc.ExecutionError, match=r"strides \(4, 16\).*C-contiguous \(16, 4\)"):
        as_device_array(_Strided())


class _Offset:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": ((1 << 20) + 4, False),
                                "version": 3, "strides": None}


def test_cuda_array_at_an_element_offset_is_refused():
    # the kernels' arguments are llvm.align 16 (ld.global.v4): a view one float in is refused
    with pytest.raises(mlc.ExecutionError, match=r"0x100004, not a multiple of 16 bytes"):
        as_device_array(_Offset())


@pytest.mark.skipif(cuda_available(), reason="a CUDA driver is present")
def test_device_array_without_a_driver_is_a_clear_error():
    with pytest.raises(mlc.ExecutionError, match="DeviceArray needs a GPU"):
        DeviceArray.from_numpy(np.ones(4, np.float32))


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (64, 256), (128, 256))]


def _ref(x, w, b):
    return np.maximum(x @ w, 0) + b


@needs_gpu
def test_numpy_call_copies_in_and_out_cuda():
    exe = mlc.compile(mlp(), target="cuda")
    for seed in range(3):   # later calls reuse the slab: the results follow the new inputs
        args = _inputs(seed)
        np.testing.assert_allclose(exe(*args), _ref(*args), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_on_device_keeps_arrays_on_the_gpu():
    exe = mlc.compile(mlp(), target="cuda")
    for seed in range(2):
        args = _inputs(seed)
        dev = [DeviceArray.from_numpy(a) for a in args]
        y = exe.on_device(*dev)
        assert isinstance(y, DeviceArray) and y.shape == (128, 256)
        np.testing.assert_allclose(y.numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    out = DeviceArray.empty((128, 256), np.float32)
    assert exe.on_device(*dev, out=out) is out
    np.testing.assert_allclose(out.numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    with pytest.raises(mlc.ExecutionError, match="argument 'w' is float32\\(64, 128\\)"):
        exe.on_device(dev[0], DeviceArray.empty((64, 128), np.float32), dev[2])
    assert exe.benchmark(*args, number=3, repeat=2, device=True).min_ms > 0


@needs_gpu
def test_threads_calling_one_function_get_their_own_results_cuda():
    """Calls from several threads at once: one holds the function's slab, the others
    allocate their own; every result matches its own inputs."""
    exe = mlc.compile(mlp(), target="cuda")
    inputs = [_inputs(seed) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda args: exe(*args), inputs * 3))
    for args, got in zip(inputs * 3, results):
        np.testing.assert_allclose(got, _ref(*args), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_torch_cuda_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    exe = mlc.compile(mlp(), target="cuda")
    args = _inputs()
    ts = [torch.from_numpy(a).cuda() for a in args]
    y = torch.as_tensor(exe.on_device(*ts), device="cuda")
    np.testing.assert_allclose(y.cpu().numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    out = torch.empty((128, 256), device="cuda")
    exe.on_device(*ts, out=out)
    np.testing.assert_allclose(out.cpu().numpy(), _ref(*args), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_constants_reach_the_kernels_cuda():
    exe = mlc.compile(_with_constant(), target="cuda")
    rng = np.random.default_rng(0)
    for _ in range(2):   # the second call reads the same resident copy
        x = rng.standard_normal((3, 40), np.float32)
        want = x + np.arange(120, dtype=np.float32).reshape(3, 40)
        np.testing.assert_allclose(exe(x), want, rtol=1e-6)
        np.testing.assert_allclose(exe.on_device(DeviceArray.from_numpy(x)).numpy(), want, rtol=1e-6)


def _with_params():
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.add(ops.matmul(f.arg("x", shape=(16, 64)), f.param("w", w)),
                                  f.param("b", b))))
    return bb.finish(), w, b


@needs_gpu
def test_bound_parameters_stay_on_the_gpu_for_numpy_calls_cuda():
    """Parameters left out of a numpy call (their bound values) are uploaded once and kept on
    the GPU; passed explicitly, they are copied like inputs."""
    mod, w, b = _with_params()
    exe = mlc.compile(mod, target="cuda")
    rng = np.random.default_rng(1)
    for _ in range(2):
        x = rng.standard_normal((16, 64)).astype(np.float32)
        np.testing.assert_allclose(exe(x), np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)
        resident = dict(exe["main"]._device_params)
        assert set(resident) == {"w", "b"}
    assert exe["main"]._device_params["w"] is resident["w"]   # not uploaded again
    np.testing.assert_allclose(exe(x, 2 * w, b), np.maximum(x @ (2 * w) + b, 0), rtol=1e-4,
                               atol=1e-4)
